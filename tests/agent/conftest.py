import signal

import pytest
from django.utils import timezone

from agent import procs
from agent.outbox import Outbox
from agent.process import MARKER, ProcessExecutor
from jobs.models import Job, JobSpec, Pod
from quotas.models import Node, ResourceSpec, Tenant, Workspace
from tests.agent.helpers import Recorder


@pytest.fixture
def make_pod(db, django_user_model):
    """make_pod(node, status=...) -> a Pod of a one-pod job on that node."""
    user = django_user_model.objects.create(username="alice")
    workspace = Workspace.objects.create(tenant=Tenant.objects.create(name="t"), name="ws")
    counter = iter(range(1, 10_000))

    def make(node: Node, status="Running", job_status="Running"):
        n = next(counter)
        job = Job.objects.create(job_id=f"dlc-{n}", workspace=workspace, user=user, display_name=f"job {n}",
                                 user_command="true", status=job_status)
        JobSpec.objects.create(job=job, spec=node.spec, image="img")
        return Pod.objects.create(pod_id=f"dlc-{n}-worker-0", job=job, role="Worker", index=0, node=node,
                                  status=status, cpu_m=1000, mem_mib=1024, bound_at=timezone.now())

    return make


@pytest.fixture
def spec(db):
    return ResourceSpec.objects.create(instance_type="ecs.test", cpu=8, memory_mib=32768, gpu=1,
                                       on_demand_price_per_minute=1)


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def executor(tmp_path, recorder):
    """A real process executor whose pods are this test's own: none outlives it."""
    outbox = Outbox(recorder, flush_s=0.02)
    ex = ProcessExecutor("unit-node", tmp_path / "pods", outbox, ship_interval_s=0.1)
    ex.run()
    yield ex
    ex.close()
    for pgid in procs.groups_with_env(MARKER, ex.marker):
        procs.signal_group(pgid, signal.SIGKILL)
    outbox.close()
