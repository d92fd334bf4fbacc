from datetime import date, timedelta
from decimal import Decimal

import pytest

from jobs.models import Accessibility, Job, PodKind, Source
from jobs.states import JobStatus, PodStatus
from quotas.models import Node
from spot.bills import bill_jobs, job_cost
from spot.models import DailyBill
from tests.spot.builders import A10, at, make_job, price_row, public_nodes, run_pod

DAY = date(2026, 12, 2)


@pytest.fixture
def market(demo_cluster):
    price_row(at(9, 0, day=1), "0.050000")  # yesterday's last price: carried into today until 10:00
    price_row(at(10, 0), "0.030000")
    price_row(at(10, 3), "0.045000")
    price_row(at(10, 5), "0.020000")


def s(when, seconds):
    return when + timedelta(seconds=seconds)


def test_a_spot_job_pays_each_running_minute_of_every_pod_incarnation_at_that_minutes_price(market):
    first, second = public_nodes(A10)[:2]
    job = make_job(status=JobStatus.RUNNING, discount=Decimal("0.5"), pods=2)
    run_pod(job, first, started_at=s(at(10, 0), 30), finished_at=s(at(10, 4), 10), current=False,
            status=PodStatus.FAILED)
    run_pod(job, first, started_at=at(10, 6), incarnation=1)  # restarted, still running
    run_pod(job, second, index=1, started_at=at(10, 2), finished_at=at(10, 3), status=PodStatus.SUCCEEDED)

    [bill] = bill_jobs(DAY, now=s(at(10, 7), 20))

    # pod 0, incarnation 0, 10:00:30-10:04:10: 10:00 10:01 10:02 at 0.03, 10:03 10:04 at 0.045
    #   = 0.09 + 0.09 = 0.18 (5 minutes)
    # pod 0, incarnation 1, 10:06:00-now 10:07:20: 10:06 10:07 at 0.02 = 0.04 (2 minutes)
    # pod 1, 10:02:00-10:03:00: 10:02 at 0.03 = 0.03 (1 minute)
    # 8 node-minutes, 0.25; on-demand 8 x 0.147 = 1.176; saved 0.926
    assert (bill.job_id, bill.spec.instance_type, bill.day, bill.pay_type) == (job.pk, A10, DAY, "spot")
    assert (bill.minutes, bill.amount, bill.on_demand_amount, bill.savings) == (
        8, Decimal("0.250000"), Decimal("1.176000"), Decimal("0.926000"))
    assert bill.tags == {"acs:pai:dlc:payType": "spot"}


def test_a_bill_carries_its_jobs_workspace_user_and_accessibility_the_usage_page_selects_it_by(market):
    job = make_job(status=JobStatus.RUNNING, discount=Decimal("0.5"))
    Job.objects.filter(pk=job.pk).update(accessibility=Accessibility.PRIVATE)
    run_pod(job, public_nodes(A10)[0], started_at=at(10, 0), finished_at=at(10, 2))
    bill_jobs(DAY, now=at(11))
    bill_jobs(DAY, now=at(12))  # a later run updates the same bill
    bill = DailyBill.objects.get()
    assert (bill.workspace.name, bill.user.username, bill.accessibility) == ("ml-research", "bob", "PRIVATE")


def test_a_pay_as_you_go_job_pays_on_demand_and_a_quota_job_is_not_billed(market):
    node = public_nodes(A10)[0]
    payg = make_job(source=Source.PUBLIC, status=JobStatus.SUCCEEDED)
    run_pod(payg, node, kind=PodKind.PAYG, started_at=at(10, 0), finished_at=at(10, 10), status=PodStatus.SUCCEEDED)
    quota_node = Node.objects.exclude(quota=None).filter(spec__instance_type="ecs.gn6v-c8g1.16xlarge").first()
    guaranteed = make_job(source=Source.QUOTA, status=JobStatus.RUNNING, instance_type="ecs.gn6v-c8g1.16xlarge")
    run_pod(guaranteed, quota_node, kind=PodKind.GUARANTEED, started_at=at(10, 0))

    [bill] = bill_jobs(DAY, now=at(12))

    # 10 minutes x 0.147 = 1.47, nothing saved
    assert (bill.job_id, bill.pay_type, bill.minutes, bill.amount, bill.savings) == (
        payg.pk, "postpaid", 10, Decimal("1.470000"), Decimal("0"))


def test_billing_again_gives_the_same_rows_and_later_the_cost_so_far_grows(market):
    job = make_job(status=JobStatus.RUNNING, discount=Decimal("0.5"))
    run_pod(job, public_nodes(A10)[0], started_at=at(10, 4))
    first = bill_jobs(DAY, now=at(10, 6))  # 10:04 at 0.045, 10:05 at 0.02 = 0.065
    again = bill_jobs(DAY, now=at(10, 6))
    assert [(b.pk, b.minutes, b.amount) for b in first] == [(b.pk, b.minutes, b.amount) for b in again]
    assert DailyBill.objects.count() == 1
    [later] = bill_jobs(DAY, now=at(10, 8))  # + 10:06 10:07 at 0.02 = 0.105
    assert (later.pk, later.minutes, later.amount) == (first[0].pk, 4, Decimal("0.105000"))
    assert job_cost(job) == {"amount": Decimal("0.105000"), "on_demand_amount": Decimal("0.588000"),
                             "savings": Decimal("0.483000")}


def test_a_job_running_over_midnight_gets_a_bill_per_day_and_yesterdays_price_carries_over(market):
    job = make_job(status=JobStatus.RUNNING, discount=Decimal("0.5"))
    run_pod(job, public_nodes(A10)[0], started_at=at(23, 58, day=1), finished_at=at(0, 3, day=2))
    bills = bill_jobs((date(2026, 12, 1), DAY), now=at(12))
    # day 1: 23:58 23:59 at 0.05 (the 09:00 price) = 0.10; day 2: 00:00 00:01 00:02 still 0.05 = 0.15
    assert sorted((b.day, b.minutes, b.amount) for b in bills) == [
        (date(2026, 12, 1), 2, Decimal("0.100000")), (DAY, 3, Decimal("0.150000"))]


def test_a_day_that_has_not_begun_bills_nothing(market):
    assert bill_jobs(date(2026, 12, 3), now=at(12)) == []
