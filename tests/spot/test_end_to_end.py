"""A spot job through the whole platform: bidding, admission, release, and its bill.

Prices are PriceHistory rows written at controlled times (the market tick is not run), the
schedule cycle is cycle.schedule.run_cycle(now=...), and the agent's pod reports go through
jobs.lifecycle; messages to agents are recorded instead of sent.
"""

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model

from cycle import tasks as cycle_tasks
from jobs import dispatch
from jobs.lifecycle import apply_reports
from jobs.models import Job, Source
from jobs.services import JobRequest, RoleRequest, create_job
from jobs.states import JobStatus, PodStatus, PodSubStatus
from quotas.models import ResourceType
from spot.bills import bill_jobs
from spot.models import PriceHistory
from tests.spot.builders import A10, LINGJUN_TYPE, at, price_row, spec

VPC = {"VpcId": "vpc-1", "SwitchId": "vsw-1", "SecurityGroupId": "sg-1"}


@pytest.fixture(autouse=True)
def agents(monkeypatch):
    """Stop and start messages the platform would send to the node agents."""
    sent = []
    monkeypatch.setattr(dispatch, "send", lambda batch: sent.extend(batch))
    monkeypatch.setattr("jobs.cycle_requests._request_now", lambda: None)
    return sent


@pytest.fixture
def cycle(django_capture_on_commit_callbacks):
    def run(now: datetime):
        with django_capture_on_commit_callbacks(execute=True):
            cycle_tasks.process_cycle.run(now=now)
    return run


@pytest.fixture
def report(django_capture_on_commit_callbacks):
    """Every current-or-terminating live pod of the job reports ``status`` at ``when``."""
    def send(job: Job, status: str, when: datetime):
        pods = job.pods.holding()
        items = [{"pod_id": p.pod_id, "status": status, "exit_code": None if status == PodStatus.RUNNING else 137,
                  "at": when.isoformat()} for p in pods]
        with django_capture_on_commit_callbacks(execute=True):
            apply_reports(items, now=when)
    return send


def spot_job(instance_type: str, discount: str, *, resource_type=ResourceType.ECS, user_vpc=None) -> Job:
    bob = get_user_model().objects.get(username="bob")
    role = RoleRequest(instance_type=instance_type, image="pytorch:2.5", spot_strategy="SpotWithPriceLimit",
                       spot_discount_limit=Decimal(discount), spot_duration_hours=1)
    request = JobRequest(display_name="spot", user_command="python train.py", roles=[role], source=Source.SPOT,
                         resource_type=resource_type, user_vpc=user_vpc or {})
    return create_job(bob, request, now=at(9, 59))


def minute_prices(instance_type: str, start: datetime, end: datetime, price_at) -> None:
    """One PriceHistory row per minute in [start, end), as the live tick writes them."""
    rows, minute = [], start
    while minute < end:
        rows.append(PriceHistory(spec=spec(instance_type), at=minute, price=Decimal(price_at(minute))))
        minute += timedelta(minutes=1)
    PriceHistory.objects.bulk_create(rows)


def test_a_spot_job_bids_runs_when_the_price_falls_is_released_when_it_rises_and_pays_each_minute(
        demo_cluster, cycle, report):
    job = spot_job(A10, "0.3")  # bids 0.3 x 0.147 = 0.0441 per node-minute
    assert job.status == JobStatus.BIDDING

    price_row(at(10, 0), "0.060000")
    cycle(at(10, 0))
    job.refresh_from_db()
    assert job.status == JobStatus.BIDDING
    assert "bid 2.6460 /h is below the market price 3.6000 /h" in job.wait_reason

    price_row(at(10, 5), "0.030000")  # the price falls below the bid
    cycle(at(10, 5))
    job.refresh_from_db()
    assert job.status == JobStatus.ENV_PREPARING
    report(job, PodStatus.RUNNING, at(10, 5) + timedelta(seconds=30))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING

    price_row(at(10, 30), "0.080000")  # above the bid, inside the protection period (until 11:05:30)
    cycle(at(10, 30))
    cycle(at(11, 5))
    assert not job.pods.filter(terminating=True).exists()

    cycle(at(11, 10))  # protection over: released
    [pod] = job.pods.filter(terminating=True)
    assert pod.reason_code == "SpotReleased"
    report(job, PodStatus.FAILED, at(11, 10) + timedelta(seconds=20))
    pod.refresh_from_db()
    job.refresh_from_db()
    assert (pod.status, pod.sub_status, pod.status_label) == (PodStatus.FAILED, PodSubStatus.EVICTED, "Resource Preempted")
    assert (job.status, job.reason_code) == (JobStatus.FAILED, "SpotReleased")

    [bill] = bill_jobs(at(0).date(), now=at(12))
    # Ran 10:05:30-11:10:20: the minutes 10:05 .. 11:10, each at the price held in it:
    #   10:05-10:29  25 minutes x 0.030 = 0.750
    #   10:30-11:10  41 minutes x 0.080 = 3.280
    #   66 minutes, 4.030; on-demand 66 x 0.147 = 9.702; saved 5.672
    assert (bill.pay_type, bill.minutes, bill.amount, bill.on_demand_amount, bill.savings) == (
        "spot", 66, Decimal("4.030000"), Decimal("9.702000"), Decimal("5.672000"))


def lingjun_price(minute: datetime) -> str:
    if minute < at(10, 1):
        return "0.900000"
    if minute < at(10, 30):
        return "1.500000"  # above the bid at once, but inside the protection period
    if minute < at(11, 10):
        return "0.600000"
    return "1.500000"


def test_a_lingjun_spot_job_is_released_by_the_hour_average_and_never_inside_protection(demo_cluster, cycle, report):
    job = spot_job(LINGJUN_TYPE, "0.5", resource_type=ResourceType.LINGJUN, user_vpc=VPC)  # bids 1.05
    minute_prices(LINGJUN_TYPE, at(10, 0), at(12, 0), lingjun_price)
    cycle(at(10, 0))
    report(job, PodStatus.RUNNING, at(10, 0))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING

    # 10:29: price 1.50 and the hour's average ~1.48, both above the bid: protected until 11:00.
    cycle(at(10, 29))
    # 11:12: protection over and the price 1.50 is above the bid (an ECS job would go), but the
    # hour's average is (17 x 1.5 + 40 x 0.6 + 3 x 1.5) / 60 = 0.90, below it: kept.
    cycle(at(11, 12))
    assert not job.pods.filter(terminating=True).exists()

    # 11:50: the hour's average is (19 x 0.6 + 41 x 1.5) / 60 = 1.215, above the bid: released.
    cycle(at(11, 50))
    [pod] = job.pods.filter(terminating=True)
    assert pod.reason_code == "SpotReleased"
    assert "average price over the last hour" in pod.reason_message
