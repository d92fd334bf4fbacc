"""Small builders for spot tests on the demo cluster: jobs, bids, running pods, price rows."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from decimal import Decimal

from django.contrib.auth import get_user_model

from jobs.models import Job, JobSpec, Pod, PodKind, Source
from jobs.services import JobRequest, RoleRequest, create_job
from jobs.states import JobStatus, PodStatus
from quotas.models import Node, ResourceSpec, Workspace
from spot.models import PriceHistory

A10 = "ecs.gn7i-c8g1.2xlarge"  # public pool: 6 nodes of 1 GPU, on-demand 0.147 per node-minute
LINGJUN_TYPE = "ml.gu7xf.c96m1600.8-gu108"  # public pool: 2 nodes of 8 GPUs, on-demand 2.10
_ids = itertools.count(1)


def at(hh: int, mm: int = 0, day: int = 2) -> datetime:
    return datetime(2026, 12, day, hh, mm, tzinfo=timezone.utc)


def spec(instance_type: str = A10) -> ResourceSpec:
    return ResourceSpec.objects.get(instance_type=instance_type)


def public_nodes(instance_type: str = A10) -> list[Node]:
    return list(Node.objects.filter(spec__instance_type=instance_type, quota=None).order_by("name"))


def make_job(*, source=Source.SPOT, status=JobStatus.BIDDING, instance_type=A10, pods=1,
             discount=None, price_limit=None, duration_hours=1, resource_type="ECS", created_at=None) -> Job:
    n = next(_ids)
    job = Job.objects.create(
        job_id=f"dlc-test-{n}", workspace=Workspace.objects.get(name="ml-research"),
        user=get_user_model().objects.get(username="bob"), display_name=f"job {n}", user_command="true",
        source=source, status=status, resource_type=resource_type,
        **({"created_at": created_at} if created_at else {}),
    )
    JobSpec.objects.create(
        job=job, role="Worker", pod_count=pods, spec=spec(instance_type), image="img",
        spot_strategy="SpotWithPriceLimit" if source == Source.SPOT else "",
        spot_discount_limit=discount, spot_price_limit=price_limit, spot_duration_hours=duration_hours,
    )
    return job


def run_pod(job: Job, node: Node, *, kind=PodKind.SPOT, started_at=None, finished_at=None,
            incarnation=0, index=0, status=PodStatus.RUNNING, current=True) -> Pod:
    return Pod.objects.create(
        pod_id=f"{job.job_id}-worker-{index}-{incarnation}", job=job, role="Worker", index=index,
        incarnation=incarnation, current=current, node=node, kind=kind, gpu=node.spec.gpu,
        cpu_m=node.spec.cpu_m, mem_mib=node.spec.memory_mib, status=status,
        started_at=started_at, finished_at=finished_at,
    )


def price_row(when: datetime, price: str, instance_type: str = A10) -> PriceHistory:
    return PriceHistory.objects.create(spec=spec(instance_type), at=when, price=Decimal(price))


def submit_spot(instance_type: str, discount: str) -> Job:
    """A spot job of one pod, discount bid, through jobs.services.create_job (Bidding, pods unbound)."""
    role = RoleRequest(instance_type=instance_type, image="pytorch:2.5", spot_strategy="SpotWithPriceLimit",
                       spot_discount_limit=Decimal(discount), spot_duration_hours=1)
    request = JobRequest(display_name="spot", user_command="python train.py", roles=[role], source=Source.SPOT)
    return create_job(get_user_model().objects.get(username="bob"), request, now=at(9, 59))
