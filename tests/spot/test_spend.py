"""Spend as the Usage page reads it: the bills of the jobs the reader's scope (quotas.services.usage_scope)
selects, by the workspace, user and accessibility each bill copied from its job."""

from datetime import date
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model

from jobs.models import Accessibility, Job
from quotas.models import ResourceSpec, Workspace
from quotas.services import usage_scope
from spot.models import DailyBill
from spot.spend import spend_by_day
from tests.spot.builders import A10

DAY = date(2026, 12, 2)


def billed(username: str, workspace: str, amount: str, accessibility=Accessibility.PUBLIC) -> DailyBill:
    """A job of `username` in `workspace` and its one spot bill on DAY."""
    n = Job.objects.count()
    job = Job.objects.create(job_id=f"dlcspend{n:04d}", workspace=Workspace.objects.get(name=workspace),
                             user=get_user_model().objects.get(username=username), display_name=f"spend-{n}",
                             user_command="true", accessibility=accessibility)
    bill = DailyBill.of(job, spec=ResourceSpec.objects.get(instance_type=A10), day=DAY, pay_type="spot",
                        minutes=60, amount=Decimal(amount), on_demand_amount=Decimal(amount) * 2)
    bill.save()
    return bill


@pytest.fixture
def bills(alice, bob, mallory):
    # Amounts are powers of two, so a total names the bills it summed.
    billed("bob", "ml-research", "1")
    billed("alice", "ml-research", "2", Accessibility.PRIVATE)
    billed("alice", "vision-lab", "4")
    billed("mallory", "red-team", "8")  # another tenant
    billed("bob", "ml-research", "16", Accessibility.PRIVATE)


@pytest.mark.parametrize("reader, workspace, total", [
    ("bob", "ml-research", "17"),  # his own, private too; not alice's private job nor vision-lab's
    ("bob_admin", "ml-research", "23"),  # every job of his tenant's workspaces, private ones included
    ("alice", "ml-research", "23"),  # the owner of both workspaces: the same
    ("alice", "vision-lab", "23"),
    ("mallory", "red-team", "8"),  # only her tenant's
    ("mallory", "ml-research", "0"),  # not a member: nothing, whoever's it is
    ("charlie", "ml-research", "0"),  # in no workspace
])
def test_a_reader_sums_only_the_bills_of_the_jobs_his_scope_shows(bills, request, reader, workspace, total):
    user = request.getfixturevalue(reader)
    who = usage_scope(user, Workspace.objects.get(name=workspace)).who
    spent = spend_by_day(who, DAY, DAY)
    assert sum((s.amount for s in spent), Decimal(0)) == Decimal(total)
    assert all(s.on_demand_amount == 2 * s.amount for s in spent)
