"""dbkit/bulk.insert_family: a job and its rows in one statement on PostgreSQL, every field as the
ORM would store it, and all or nothing."""

import re
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dbkit import bulk
from jobs import history
from jobs.models import Job, JobEvent, JobSpec, Pod, StatusTransition
from quotas.models import Membership, Quota, ResourceSpec
from tests.jobs.conftest import NLP, V100


def family(bob, job_id="dlcfamily0001", pod_ids=("p-0", "p-1")):
    membership = Membership.objects.get(user=bob, is_default=True)
    now = timezone.now()
    job = Job(job_id=job_id, workspace_id=membership.workspace_id, user=bob, display_name="train",
              user_command="python train.py", envs={"EPOCHS": "3", "NOTE": "ünïcode"}, priority=7,
              quota=Quota.objects.get(quota_id=NLP), oversold_type="AcceptQuotaOverSold",
              user_vpc={"VpcId": "vpc-1"}, max_running_time_minutes=90, status="Queuing", submitted_at=now)
    steps, events = history.history_rows([history.Transition(job, "Creating", "Queuing", "JobSubmitted", "submitted", now)])
    spec = JobSpec(role="Worker", pod_count=len(pod_ids), spec=ResourceSpec.objects.get(instance_type=V100),
                   image="pytorch:2.5", spot_discount_limit=Decimal("0.50"), spot_duration_hours=0)
    pods = [Pod(pod_id=pod_id, role="Worker", index=i, cpu_m=64000, mem_mib=1024, gpu=8, gpu_indices=[i],
                created_at=now) for i, pod_id in enumerate(pod_ids)]
    return job, [*steps, *events, spec, *pods]


def columns(obj) -> dict:
    """Every column of a row but its pk (which the database assigns)."""
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields if not f.primary_key}


def test_it_stores_every_field_as_given_in_one_statement_on_postgresql(bob):
    job, children = family(bob)
    given = [columns(o) for o in (job, *children)]
    with CaptureQueriesContext(connection) as statements:
        bulk.insert_family(job, children)
    writes = [q["sql"] for q in statements.captured_queries if q["sql"].startswith(("INSERT", "WITH"))]
    assert len(writes) == (1 if connection.vendor == "postgresql" else 5)
    assert job.pk is not None and not job._state.adding
    read = Job.objects.get(pk=job.pk)
    assert {k: v for k, v in columns(read).items() if k != "modified_at"} == {
        k: v for k, v in given[0].items() if k != "modified_at"}
    assert read.modified_at is not None  # auto_now, set as save() sets it
    for model, fk in ((StatusTransition, "job_id"), (JobEvent, "job_id"), (JobSpec, "job_id"), (Pod, "job_id")):
        rows = [columns(r) for r in model.objects.filter(**{fk: job.pk}).order_by("pk")]
        expected = [{**g, fk: job.pk} for o, g in zip((job, *children), given) if type(o) is model]
        assert rows == expected, model.__name__


def test_a_bad_child_stores_nothing_of_the_family(bob):
    Job.objects.all().delete()
    first, children = family(bob)
    bulk.insert_family(first, children)
    job, children = family(bob, job_id="dlcfamily0002", pod_ids=("p-2", "p-0"))  # p-0 is taken
    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.insert_family(job, children)
    assert list(Job.objects.values_list("job_id", flat=True)) == ["dlcfamily0001"]
    assert sorted(Pod.objects.values_list("pod_id", flat=True)) == ["p-0", "p-1"]
    assert JobEvent.objects.count() == StatusTransition.objects.count() == JobSpec.objects.count() == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the one statement is PostgreSQL's")
def test_the_statement_is_built_once_for_a_set_of_models_and_a_second_family_still_gets_its_own_values(bob):
    bulk._family_statement.cache_clear()
    first, children = family(bob)
    bulk.insert_family(first, children)
    job, children = family(bob, job_id="dlcfamily0002", pod_ids=("p-2", "p-3", "p-4"))  # more pods: same text
    bulk.insert_family(job, children)
    assert bulk._family_statement.cache_info().misses == 1
    assert sorted(Pod.objects.filter(job=job).values_list("pod_id", flat=True)) == ["p-2", "p-3", "p-4"]
    assert list(Pod.objects.filter(job=first).order_by("index").values_list("pod_id", flat=True)) == ["p-0", "p-1"]


def test_rows_of_several_tables_go_in_one_statement_on_postgresql_as_given(bob):
    """bulk.insert_rows (the history of a batch of reports with its pod events, and of a cycle)."""
    from jobs.models import PodEvent

    job, children = family(bob)
    bulk.insert_family(job, children)
    pod = Pod.objects.filter(job=job).order_by("index").first()
    now = timezone.now()
    steps = [history.Transition(job, "Queuing", "EnvPreparing", "JobAdmitted", "admitted", now),
             history.Transition(job, "EnvPreparing", "Running", "JobRunning", "", now)]
    events = bulk.Insert(PodEvent, ("pod", "at", "type", "reason", "message"),
                         [(pod.pk, now, "Normal", "Started", "Pod running on n1"), (pod.pk, now, "Normal", "X", "ü")])
    with CaptureQueriesContext(connection) as statements:
        history.record(steps, events, bulk.Insert(PodEvent, ("pod",), []))  # an empty one is left out
    # Django logs an executemany as "N times: INSERT ..."
    writes = [q["sql"] for q in statements.captured_queries if re.match(r"(\d+ times: )?(INSERT|WITH)", q["sql"])]
    assert len(writes) == (1 if connection.vendor == "postgresql" else 3)
    assert list(job.status_history.filter(previous="Queuing").values_list("status", "reason")) == [
        ("EnvPreparing", "JobAdmitted")]
    assert list(job.events.filter(at=now).order_by("pk").values_list("reason", "message")) == [
        ("JobAdmitted", "admitted"), ("JobRunning", "Job status changed from EnvPreparing to Running")]
    assert list(pod.events.order_by("pk").values_list("reason", "message")) == [
        ("Started", "Pod running on n1"), ("X", "ü")]
