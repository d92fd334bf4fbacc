"""How large a job may be, how many may wait in a workspace, and deleting a job of any size (issue
#27, item 8). The services decide, so the console and the API refuse alike."""

from dataclasses import replace

import pytest

from jobs.models import Job, Pod, PodEvent, pod_name
from jobs.services import ValidationFailed, create_job, delete_job, stop_job
from tests.jobs.conftest import V100, make_request


def test_a_workspace_holds_at_most_the_configured_number_of_waiting_jobs(bob, settings):
    settings.OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE = 2
    first, _ = create_job(bob, make_request()), create_job(bob, make_request())

    with pytest.raises(ValidationFailed) as err:
        create_job(bob, make_request())
    assert "already has 2 waiting jobs" in err.value.errors["workspace_id"]
    assert Job.objects.count() == 2

    stop_job(bob, first)  # a stopped job no longer waits: there is room again
    create_job(bob, make_request())


def test_no_limit_on_waiting_jobs_when_it_is_zero(bob, settings):
    settings.OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE = 0
    for _ in range(3):
        create_job(bob, make_request())
    assert Job.objects.count() == 3


def test_a_client_token_retry_is_answered_even_when_the_workspace_is_full(bob, settings):
    settings.OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE = 1
    job = create_job(bob, make_request(client_token="once"))
    assert create_job(bob, make_request(client_token="once")).pk == job.pk


def test_a_job_with_more_pods_than_a_statement_takes_parameters_can_be_deleted(bob):
    """A job from before the limits, of 70,000 pods: PostgreSQL takes at most 65,535 parameters a
    statement, and one delete() of the job put every pod's key into one (SQLite's backend batches
    on its own, so there this passes either way)."""
    job = create_job(bob, make_request())
    pods = [Pod(job=job, pod_id=pod_name(job.job_id, "Worker", i), role="Worker", index=i, incarnation=0,
                cpu_m=1000, mem_mib=1024, gpu=0) for i in range(1, 70_000)]
    Pod.objects.bulk_create(pods, batch_size=5000)
    PodEvent.objects.create(pod=pods[-1], reason="Scheduled", message="on node x")

    delete_job(bob, job)

    assert not Job.objects.exists() and not Pod.objects.exists() and not PodEvent.objects.exists()


def test_a_job_of_the_most_pods_is_accepted(bob, monkeypatch):
    from jobs import services

    # A tree of 1,000 such nodes: the job could start, so only the pod limit speaks.
    monkeypatch.setattr(services, "scope_nodes", lambda quota_pk: [(V100, 8, 64, 256 * 1024)] * 1000)
    roles = make_request(pods=1000).roles
    job = create_job(bob, replace(make_request(), roles=roles))
    assert job.pods.count() == 1000
