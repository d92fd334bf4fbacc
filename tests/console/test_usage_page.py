"""The Usage page and its CSV exports: whose usage each user reads (a member their workspace, an admin
every workspace of the tenant, nobody another tenant's), the range in the URL, refusals naming the field,
and exports whose cells a spreadsheet reads as text."""

import csv
import io
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model

from jobs.models import Accessibility, Job, Pod, PodKind
from jobs.states import PodStatus
from jobs.usage_history import roll_up
from quotas.models import Membership, Quota, ResourceSpec, Role, Workspace
from spot.models import DailyBill
from tests.console.conftest import client_for

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 3, 2, tzinfo=timezone.utc)
RANGE = "?from=2026-03-02&to=2026-03-02"


def ran(user, workspace: str, quota: str | None, gpu: int, hours: float, *, kind=PodKind.GUARANTEED, **fields) -> Job:
    """A job whose one pod ran `hours` from 10:00 on the range's day."""
    n = Job.objects.count()
    job = Job.objects.create(job_id=f"dlcuse{n:05d}", workspace=Workspace.objects.get(name=workspace), user=user,
                             display_name=f"use-{n}", user_command="true",
                             quota=Quota.objects.get(name=quota) if quota else None, **fields)
    start = DAY + timedelta(hours=10)
    Pod.objects.create(pod_id=f"{job.job_id}-worker-0", job=job, role="Worker", index=0, gpu=gpu, kind=kind,
                       status=PodStatus.SUCCEEDED, started_at=start, finished_at=start + timedelta(hours=hours))
    return job


def exported(client, table: str, query: str = RANGE) -> list[list[str]]:
    response = client.get(f"/usage/{table}.csv{query}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


@pytest.fixture(params=[False, True], ids=["from the pods", "rolled up"])
def settle(request):
    """Before reading: nothing (the pods are summed one by one), or roll up the finished ones: the
    walls hold on GpuDayUse's rows as on the pods'."""
    return roll_up if request.param else lambda: 0


@pytest.fixture
def cluster(alice, bob, mallory, settle):
    ran(alice, "ml-research", "nlp-team", 8, 2)  # 16 GPU-h
    ran(bob, "ml-research", "nlp-team", 4, 1.5, kind=PodKind.IDLE)  # 6
    ran(alice, "vision-lab", "cv-team", 2, 3)  # 6
    ran(mallory, "red-team", "red-quota", 8, 10)  # 80, in the other tenant
    settle()


def test_a_member_reads_only_his_own_workspace(cluster, bob, client):
    bob_client = client_for(client, bob)
    assert exported(bob_client, "workspaces") == [
        ["workspace", "guaranteed", "idle", "spot", "public", "total"],
        ["ml-research", "16.0", "6.0", "0.0", "0.0", "22.0"]]
    html = bob_client.get(f"/usage/{RANGE}").content.decode()
    assert "vision-lab" not in html and "red-team" not in html and "cv-team" not in html


def test_a_workspace_admin_reads_every_workspace_of_his_tenant_and_nothing_of_another(cluster, bob_admin, client):
    rows = exported(client_for(client, bob_admin), "workspaces")
    assert [r[0] for r in rows[1:]] == ["ml-research", "vision-lab"]
    assert rows[2][-1] == "6.0"
    users = exported(client, "users")
    assert {r[0] for r in users[1:]} == {"alice", "bob"}


def test_staff_does_not_read_another_tenant_and_its_owner_reads_only_hers(cluster, alice, mallory, client):
    assert [r[0] for r in exported(client_for(client, alice), "workspaces")[1:]] == ["ml-research", "vision-lab"]
    assert exported(client_for(client, mallory), "quotas")[1:] == [["red-quota", "80.0", "0.0", "0.0", "0.0", "80.0"]]


def test_a_member_does_not_count_private_jobs_of_others(alice, bob, client, settle):
    ran(alice, "ml-research", "nlp-team", 8, 1, accessibility=Accessibility.PRIVATE)
    ran(bob, "ml-research", "nlp-team", 1, 1)
    settle()
    assert exported(client_for(client, bob), "users")[1:] == [["bob", "1.0", "0.0", "0.0", "0.0", "1.0"]]


def test_the_page_shows_the_chosen_range_with_a_chart_and_a_table_per_block(cluster, alice_client):
    response = alice_client.get(f"/usage/{RANGE}")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'value="2026-03-02"' in html and "28.00" in html  # the range's inputs; 16 + 6 + 6 GPU-h in the stats
    for key in ("workspaces", "quotas", "users", "sources", "queueing", "preemptions", "spend"):
        assert f'id="usage-{key}"' in html and f"/usage/{key}.csv?from=2026-03-02&amp;to=2026-03-02" in html
    assert 'data-figure="fig-usage-quotas-20260302-20260302"' in html
    assert '<a href="/usage/"' in html  # the nav link


def test_the_default_range_is_the_last_seven_days(alice_client):
    today = datetime.now(timezone.utc).date()
    html = alice_client.get("/usage/").content.decode()
    assert f'value="{today - timedelta(days=6)}"' in html and f'value="{today}"' in html


@pytest.mark.parametrize("query, field, words", [
    ("?from=2026-13-01", "From", "Enter a date as YYYY-MM-DD."),
    ("?from=2026-03-05&to=2026-03-01", "To", "must be on or after From"),
    ("?from=2025-01-01&to=2026-03-01", "To", "at most 366 days"),
])
def test_a_bad_range_is_refused_naming_the_field(alice_client, query, field, words):
    response = alice_client.get(f"/usage/{query}")
    assert response.status_code == 400
    assert f"{field}: " in response.content.decode() and words in response.content.decode()
    csv_answer = alice_client.get(f"/usage/users.csv{query}")
    assert csv_answer.status_code == 400 and f"{field.lower()}: " in csv_answer.content.decode()


def test_an_unknown_table_is_a_404(alice_client):
    assert alice_client.get(f"/usage/secrets.csv{RANGE}").status_code == 404


def test_exports_keep_a_name_a_spreadsheet_would_run_as_text(alice, alice_client):
    Workspace.objects.filter(name="vision-lab").update(name='=HYPERLINK("http://evil.example","x")')
    ran(alice, '=HYPERLINK("http://evil.example","x")', "cv-team", 1, 1)
    rows = exported(alice_client, "workspaces")
    assert rows[1][0] == "'=HYPERLINK(\"http://evil.example\",\"x\")"


def test_spend_and_savings_come_from_the_daily_bills(alice, bob, client):
    spot = ran(bob, "ml-research", None, 8, 1, kind=PodKind.SPOT, source="spot")
    vision = ran(alice, "vision-lab", None, 8, 1, kind=PodKind.SPOT, source="spot")
    spec = ResourceSpec.objects.get(instance_type="ml.gu7xf.c96m1600.8-gu108")
    DailyBill.objects.bulk_create([
        DailyBill.of(spot, spec=spec, day=DAY.date(), pay_type="spot", minutes=60, amount=Decimal("50.400000"),
                     on_demand_amount=Decimal("126.000000")),
        DailyBill.of(vision, spec=spec, day=DAY.date(), pay_type="spot", minutes=60, amount=Decimal("1.000000"),
                     on_demand_amount=Decimal("2.000000")),
        DailyBill.of(spot, spec=spec, day=DAY.date() + timedelta(days=1), pay_type="spot", minutes=60,
                     amount=Decimal("9.000000"), on_demand_amount=Decimal("9.500000")),  # after the range
    ])
    bob_client = client_for(client, bob)
    assert exported(bob_client, "spend")[1:] == [
        ["2026-03-02", "spot", "60", "50.400000", "126.000000", "75.600000"]]
    html = bob_client.get(f"/usage/{RANGE}").content.decode()
    assert "75.60" in html and "50.40" in html


def test_a_user_in_no_workspace_reads_nothing(cluster, charlie_client):
    response = charlie_client.get(f"/usage/{RANGE}")
    assert response.status_code == 200
    assert exported(charlie_client, "workspaces")[1:] == []


# --- the Quotas page for members ----------------------------------------------------------------------

def test_a_member_reads_the_quotas_of_his_tenant_without_changing_them(bob_client, mallory):
    response = bob_client.get("/quotas/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "nlp-team" in html and "llm-pretrain" in html and "red-quota" not in html
    assert "Create Quota" not in html and "/edit/" not in html
    assert bob_client.get("/quotas/new/").status_code == 403


def test_a_viewer_of_the_other_tenant_reads_only_its_quotas(mallory, client):
    viewer = get_user_model().objects.create_user("victor", "v@example.com", "x")
    Membership.objects.create(workspace=Workspace.objects.get(name="red-team"), user=viewer, role=Role.VIEWER)
    html = client_for(client, viewer).get("/quotas/").content.decode()
    assert "red-quota" in html and "nlp-team" not in html and "Create Quota" not in html


def test_a_user_in_no_workspace_reads_no_quota(charlie_client):
    response = charlie_client.get("/quotas/")
    assert response.status_code == 200 and "No quotas yet." in response.content.decode()
