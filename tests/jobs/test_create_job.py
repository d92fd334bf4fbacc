from dataclasses import replace
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Job, JobSpec, Pod
from jobs.services import (
    PodResources, RoleRequest, ValidationFailed, can_change, create_job, delete_job,
    stop_job, update_job_priority, visible_jobs,
)
from quotas.models import Membership, Role, Workspace
from tests.jobs.conftest import CV, NLP, V100, make_request

A10 = "ecs.gn7i-c8g1.2xlarge"
LINGJUN = "ml.gu7xf.c96m1600.8-gu108"


def worker(**kw):
    return RoleRequest(**{"role": "Worker", "pod_count": 1, "instance_type": V100, "image": "pytorch:2.5", **kw})


def own(resources: PodResources, **kw):
    """A worker with its own resources (ResourceConfig) instead of an instance type."""
    return worker(instance_type="", resources=resources, **kw)


def spot_worker(**kw):
    return worker(**{"instance_type": A10, "spot_strategy": "SpotWithPriceLimit", **kw})


BAD_INPUTS = [
    ("priority", dict(priority=0), "1 to 9"),
    ("elastic_spec.ResizeInPlace", dict(pods=2, elastic_spec={"EnableElasticTraining": True, "MinParallelism": 1,
                                                              "MaxParallelism": 2, "ResizeInPlace": "yes"}),
     "must be true or false, got 'yes'"),
    ("elastic_spec.ResizeInPlace", dict(elastic_spec={"ResizeInPlace": True}), "applies to elastic training only"),
    ("priority", dict(priority=10), "1 to 9"),
    ("display_name", dict(display_name="  "), "required"),
    ("user_command", dict(user_command=""), "required"),
    ("job_type", dict(job_type="SparkJob"), "PyTorchJob"),
    ("resource_type", dict(resource_type="GPU"), "ECS, Lingjun"),
    ("source", dict(source="free"), "quota, spot, public"),
    ("quota_id", dict(quota_id=None), "is required for source 'quota'"),
    ("quota_id", dict(quota_id="quota99999999"), "no quota with ResourceId"),
    ("quota_id", dict(quota_id=CV), "not bound to workspace ml-research"),
    ("quota_id", dict(quota_id="quota00000004"), "resource type Lingjun"),
    ("quota_id", dict(source="public"), "only for source 'quota'"),
    ("oversold_type", dict(oversold_type="Sometimes"), "AcceptQuotaOverSold"),
    ("oversold_type", dict(source="public", quota_id=None, oversold_type="AcceptQuotaOverSold"), "only for jobs on a Resource Quota"),
    ("roles", dict(roles=[]), "at least one role"),
    ("roles[0].pod_count", dict(roles=[worker(pod_count=0)]), "1 to 1000"),
    ("roles[0].instance_type", dict(roles=[worker(instance_type="ecs.nope")]), "ecs.gn6v-c8g1.16xlarge"),
    ("roles[0].instance_type", dict(roles=[worker(instance_type="")]), "or the pods' own resources (ResourceConfig)"),
    ("roles[0].instance_type", dict(roles=[worker(instance_type=LINGJUN)]), "is a Lingjun instance type"),
    ("roles[0].image", dict(roles=[worker(image="")]), "required"),
    ("roles[1].role", dict(roles=[worker(), worker()]), "more than once"),
    ("roles[0].spot_strategy", dict(roles=[worker(spot_strategy="SpotWithPriceLimit")]), "only for source 'spot'"),
    ("roles[0].spot_discount_limit", dict(source="spot", quota_id=None, roles=[spot_worker()]), "SpotDiscountLimit"),
    ("roles[0].spot_discount_limit", dict(source="spot", quota_id=None,
                                          roles=[spot_worker(spot_discount_limit=Decimal("0.95"))]), "0.1, 0.2"),
    ("roles[0].spot_strategy", dict(source="spot", quota_id=None,
                                    roles=[spot_worker(spot_strategy="", spot_discount_limit=Decimal("0.5"))]),
     "SpotWithPriceLimit"),
    ("roles[0].spot_duration_hours", dict(source="spot", quota_id=None,
                                          roles=[spot_worker(spot_discount_limit=Decimal("0.5"), spot_duration_hours=3)]),
     "0 or 1"),
    ("roles[0].resource_config", dict(roles=[worker(resources=PodResources(1, 8, 32768))]), "not both"),
    ("roles[0].resource_config", dict(source="public", quota_id=None,
                                      roles=[own(PodResources(1, 8, 32768))]), "Resource Quota jobs"),
    ("roles[0].resource_config.gpu", dict(roles=[own(PodResources(-1, 8, 32768))]), "from 0 to 1024"),
    ("roles[0].resource_config.cpu", dict(roles=[own(PodResources(1, "8", 32768))]), "from 1 to 4096"),
    ("roles[0].resource_config.memory_mib", dict(roles=[own(PodResources(1, 8, 0))]), "MiB from 1"),
    ("roles[0].resource_config", dict(roles=[own(PodResources(9, 8, 32768))]), "its nodes: 8 GPU / 64 vCPU"),
    ("envs", dict(envs={"1BAD": "x"}), "letters, digits and _"),
    ("max_running_time_minutes", dict(max_running_time_minutes=0), "1 to 525600"),
    ("termination_grace_s", dict(termination_grace_s=-1), "0 to 3600"),
    ("ft_run_type", dict(ft_run_type="Sometimes"), "Synchronous"),
    ("ft_max_restarts", dict(ft_max_restarts=-1), "0 to 100"),
    ("workspace_id", dict(workspace_id=987654), "not a member"),
]


@pytest.mark.parametrize(("field", "change", "allowed"), BAD_INPUTS, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_INPUTS)])
def test_it_names_the_bad_field_and_what_is_allowed_and_stores_nothing(bob, field, change, allowed):
    with pytest.raises(ValidationFailed) as err:
        create_job(bob, make_request(**change))
    assert field in err.value.errors, err.value.errors
    assert allowed in err.value.errors[field]
    assert not Job.objects.exists() and not Pod.objects.exists()


def test_it_reports_every_problem_at_once(bob):
    with pytest.raises(ValidationFailed) as err:
        create_job(bob, make_request(priority=11, display_name="", roles=[worker(pod_count=0)]))
    assert {"priority", "display_name", "roles[0].pod_count"} <= set(err.value.errors)


def test_a_lingjun_spot_bid_needs_the_user_vpc(alice):
    request = make_request(resource_type="Lingjun", source="spot", quota_id=None,
                           roles=[worker(instance_type=LINGJUN, spot_strategy="SpotWithPriceLimit",
                                         spot_discount_limit=Decimal("0.5"))])
    with pytest.raises(ValidationFailed) as err:
        create_job(alice, request)
    assert "user_vpc.VpcId" in err.value.errors


def test_a_user_outside_the_workspace_cannot_create_a_job(charlie):
    with pytest.raises(ValidationFailed) as err:
        create_job(charlie, make_request())
    assert "member of no workspace" in err.value.errors["workspace_id"]


def test_a_viewer_cannot_create_a_job(charlie):
    Membership.objects.create(workspace=Workspace.objects.get(name="ml-research"), user=charlie, role=Role.VIEWER)
    with pytest.raises(ValidationFailed) as err:
        create_job(charlie, make_request())
    assert "viewer" in err.value.errors["workspace_id"] and "owner, admin or member" in err.value.errors["workspace_id"]
    assert not Job.objects.exists()


def test_it_stores_the_job_its_roles_and_pods_and_queues_it(bob, cycle_requests, django_capture_on_commit_callbacks):
    request = make_request(roles=[worker(role="Master"), worker(pod_count=2)], envs={"EPOCHS": "3"}, priority=7)
    with django_capture_on_commit_callbacks(execute=True):
        job = create_job(bob, request)
    job.refresh_from_db()
    assert job.status == "Queuing" and job.submitted_at is not None
    assert job.job_id.startswith("dlc") and len(job.job_id) == 15 and job.job_id[3:].isalnum()
    assert job.workspace.name == "ml-research"  # bob's default workspace
    assert job.quota.quota_id == NLP and job.oversold_type == "ForbiddenQuotaOverSold" and job.priority == 7
    assert list(JobSpec.objects.filter(job=job).values_list("role", "pod_count")) == [("Master", 1), ("Worker", 2)]
    pods = list(job.pods.order_by("role", "index"))
    assert [p.pod_id for p in pods] == [f"{job.job_id}-master-0", f"{job.job_id}-worker-0", f"{job.job_id}-worker-1"]
    assert all(p.incarnation == 0 and p.gpu == 8 and p.cpu_m == 64000 and p.node is None for p in pods)
    assert cycle_requests == [1]


def test_a_role_with_its_own_resources_stores_them_on_the_role_and_its_pods(bob):
    job = create_job(bob, make_request(roles=[own(PodResources(gpu=2, cpu=12, memory_mib=48 * 1024), pod_count=3)]))
    role = JobSpec.objects.get(job=job)
    assert (role.spec, role.gpu, role.cpu, role.memory_mib) == (None, 2, 12, 48 * 1024)
    assert str(role.shape) == "2 GPU · 12 vCPU · 48 GiB each" and role.bid_price is None
    assert [(p.gpu, p.cpu_m, p.mem_mib) for p in job.pods.order_by("index")] == [(2, 12000, 48 * 1024)] * 3


def test_the_nodes_of_a_quota_tree_are_read_once_for_many_jobs(bob):
    with CaptureQueriesContext(connection) as queries:
        for gpus in (1, 2, 3):
            create_job(bob, make_request(roles=[own(PodResources(gpus, 8, 32768))]))
        create_job(bob, make_request())
    assert sum('"quotas_node"' in q["sql"] for q in queries.captured_queries) == 1
    assert [p.gpu for p in Pod.objects.order_by("pk")] == [1, 2, 3, 8]


@pytest.mark.parametrize(("roles", "field", "says"), [
    ([RoleRequest(pod_count=1000, instance_type=V100, image="pytorch:2")], "roles[0].pod_count",
     "asks for 1000 pods of ecs.gn6v-c8g1.16xlarge, one node each, and quota nlp-team's tree has 4 such nodes"),
    ([RoleRequest(role="Master", pod_count=3, instance_type=V100, image="pytorch:2"),
      RoleRequest(role="Worker", pod_count=2, instance_type=V100, image="pytorch:2")], "roles[1].pod_count",
     "asks for 5 pods of"),
    ([own(PodResources(8, 8, 32768), pod_count=5)], "roles", "ask for 40 GPUs in all, and quota nlp-team's tree has 32"),
])
def test_a_job_that_could_never_start_is_refused_saying_what_the_tree_has(bob, roles, field, says):
    with pytest.raises(ValidationFailed) as info:
        create_job(bob, make_request(roles=roles))
    assert says in info.value.errors[field] and "it could never start" in info.value.errors[field]
    assert not Job.objects.exists()


def test_a_public_job_asking_more_nodes_than_the_pool_has_is_refused(alice):
    request = make_request(source="public", quota_id=None,
                           roles=[RoleRequest(pod_count=500, instance_type="ecs.g7.xlarge", image="python:3.12")])
    with pytest.raises(ValidationFailed) as info:
        create_job(alice, request)
    assert "and the public pool has" in info.value.errors["roles[0].pod_count"]


def test_a_role_of_an_instance_type_keeps_its_resources_on_the_type(bob):
    role = JobSpec.objects.get(job=create_job(bob, make_request()))
    assert (role.spec.instance_type, role.gpu, role.cpu, role.memory_mib) == (V100, None, None, None)
    assert role.shape.instance_type == V100 and role.shape.gpu == 8


def test_a_spot_job_starts_in_bidding(alice):
    job = create_job(alice, make_request(source="spot", quota_id=None,
                                         roles=[spot_worker(spot_discount_limit=Decimal("0.5"))]))
    assert job.status == "Bidding"
    assert job.specs.get().bid_price == Decimal("0.073500")


def test_alice_may_pick_another_of_her_workspaces(alice):
    vision = Workspace.objects.get(name="vision-lab")
    job = create_job(alice, make_request(workspace_id=vision.pk, quota_id=CV))
    assert job.workspace == vision


def test_only_members_see_a_job_and_only_writers_change_it(alice, bob, charlie):
    job = create_job(bob, make_request())
    assert list(visible_jobs(alice)) == [job] and list(visible_jobs(charlie)) == []
    assert can_change(alice, job) and can_change(bob, job) and not can_change(charlie, job)
    Membership.objects.create(workspace=job.workspace, user=charlie, role=Role.VIEWER)
    assert list(visible_jobs(charlie)) == [job] and not can_change(charlie, job)
    with pytest.raises(PermissionDenied):
        update_job_priority(charlie, job, 9)


def test_a_member_changes_only_their_own_jobs_and_admins_change_any(alice, bob, charlie):
    """PAI's rule: a colleague's job is stopped or deleted only by the workspace's owners and admins."""
    theirs = create_job(bob, make_request())
    Membership.objects.create(workspace=theirs.workspace, user=charlie, role=Role.MEMBER)
    mine = create_job(charlie, make_request())
    assert can_change(charlie, mine) and not can_change(charlie, theirs) and not can_change(bob, mine)
    with pytest.raises(PermissionDenied, match="only the user who submitted it"):
        stop_job(charlie, theirs)
    with pytest.raises(PermissionDenied):
        delete_job(charlie, theirs)
    assert Job.objects.get(pk=theirs.pk).status == "Queuing"
    Membership.objects.filter(workspace=theirs.workspace, user=charlie).update(role=Role.ADMIN)
    assert can_change(charlie, theirs)
    stop_job(charlie, theirs)
    assert Job.objects.get(pk=theirs.pk).status in ("Stopping", "Stopped")


def test_it_changes_the_priority_of_a_waiting_job(bob):
    job = create_job(bob, make_request())
    update_job_priority(bob, job, 9)
    assert Job.objects.get(pk=job.pk).priority == 9
    with pytest.raises(ValidationFailed, match="1 to 9"):
        update_job_priority(bob, job, 12)


def test_a_waiting_job_can_be_deleted_but_not_a_running_one(bob):
    job = create_job(bob, make_request())
    delete_job(bob, job)
    assert not Job.objects.exists() and not Pod.objects.exists()
    running = create_job(bob, make_request())
    Job.objects.filter(pk=running.pk).update(status="Running")
    with pytest.raises(ValidationFailed, match="stop it before deleting"):
        delete_job(bob, running)


def test_the_request_is_a_plain_dataclass_others_can_build(bob):
    request = replace(make_request(), display_name="from the api")
    assert create_job(bob, request).display_name == "from the api"


def test_a_spot_role_needs_an_instance_type_with_a_public_pool(alice):
    from quotas.models import Node

    Node.objects.filter(spec__instance_type=V100, quota=None).delete()  # V100 nodes only in quotas now
    request = make_request(source="spot", quota_id=None, oversold_type=None)
    request.roles[0].spot_strategy, request.roles[0].spot_discount_limit = "SpotWithPriceLimit", Decimal("0.5")
    with pytest.raises(ValidationFailed) as failed:
        create_job(alice, request)
    message = failed.value.errors["roles[0].instance_type"]
    assert "no preemptible resources" in message and "ecs.gn7i-c8g1.2xlarge" in message


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the one write is PostgreSQL's")
def test_on_postgresql_a_job_is_three_reads_and_one_write_in_no_transaction_of_its_own(bob):
    create_job(bob, make_request(roles=[own(PodResources(1, 8, 32768))]))  # the quota's node shapes, cached
    with CaptureQueriesContext(connection) as queries:
        job = create_job(bob, make_request(roles=[own(PodResources(2, 8, 32768), pod_count=3)]))
    statements = [q["sql"] for q in queries.captured_queries]
    # the memberships, the quota, the workspace's waiting jobs counted, and the job with its history,
    # event, role and pods; no savepoint
    assert len(statements) == 4 and statements[3].startswith("WITH p AS (INSERT INTO"), statements
    assert (job.pods.count(), job.status_history.count(), job.events.count()) == (3, 1, 1)
