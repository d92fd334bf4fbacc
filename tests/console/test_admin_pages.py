"""Quotas, nodes, Spot Market, Billing (CSV) and Access Keys."""

import csv
import io
import json
import re
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apikit.models import AccessKey
from cycle import tasks as cycle_tasks
from jobs.models import Job
from quotas.models import Node, Quota, ResourceSpec, Workspace
from spot.models import DailyBill, PriceHistory
from tests.console.conftest import quota_job, spot_job

pytestmark = pytest.mark.django_db


def test_the_quota_tree_shows_guaranteed_and_used_gpus(alice_client, alice):
    quota_job(alice, pods=1)  # 8 of nlp-team's 16 GPUs
    cycle_tasks.process_cycle.run()
    html = alice_client.get("/quotas/").content.decode()
    nlp = re.search(r"<strong>nlp-team</strong>.*?</tr>", html, re.S)[0]
    assert re.findall(r'<td class="num">(\d+)[ <]', nlp) == ["16", "8", "0", "0"]
    assert 'data-width="50"' in nlp
    assert html.index("ml-platform") < html.index("nlp-team")  # the parent first, children below


def test_an_admin_creates_a_quota_with_nodes_of_the_public_pool_and_a_workspace(alice_client):
    nodes = list(Node.objects.filter(quota=None, spec__instance_type="ecs.g7.xlarge")[:2])
    research = Workspace.objects.get(name="ml-research")
    response = alice_client.post("/quotas/new/", {
        "name": "cpu-team", "resource_type": "ECS", "queue_strategy": "StrictFIFO",
        "min_runtime_before_preemption_s": "600", "workspaces": [research.pk], "nodes": [n.pk for n in nodes],
    })
    assert response.status_code == 302
    quota = Quota.objects.get(name="cpu-team")
    assert quota.quota_id.startswith("quota") and quota.tenant.name == "demo"
    assert set(quota.nodes.all()) == set(nodes)
    assert list(quota.workspaces.all()) == [research]


def test_taking_a_node_off_a_quota_returns_it_to_the_public_pool(alice_client):
    quota = Quota.objects.get(name="llm-finetune")
    response = alice_client.post(f"/quotas/{quota.quota_id}/edit/", {
        "name": quota.name, "resource_type": "Lingjun", "queue_strategy": "BestEffort",
        "min_runtime_before_preemption_s": "0", "nodes": [],
    })
    assert response.status_code == 302
    assert Node.objects.filter(name="llm-finetune-gu7xf-0", quota=None).exists()


def test_a_quota_may_not_be_moved_under_itself_or_one_of_its_sub_quotas(alice_client):
    platform = Quota.objects.get(name="ml-platform")
    html = alice_client.get(f"/quotas/{platform.quota_id}/edit/").content.decode()
    parent = re.search(r'<select name="parent".*?</select>', html, re.S)[0]
    choices = set(re.findall(r'<option value="\d+"[^>]*>([^<]+)</option>', parent))
    assert choices == {"llm-pretrain", "llm-finetune"}  # not ml-platform, nlp-team or cv-team


def test_a_quota_cannot_take_nodes_of_another_resource_type(alice_client):
    node = Node.objects.filter(quota=None, spec__resource_type="Lingjun").first()
    response = alice_client.post("/quotas/new/", {"name": "mixed", "resource_type": "ECS", "queue_strategy": "BestEffort",
                                                  "min_runtime_before_preemption_s": "0", "nodes": [node.pk]})
    assert response.status_code == 200 and "this quota is ECS" in response.content.decode()


def test_nodes_show_gpu_allocation(bob_client, alice):
    quota_job(alice, pods=1)
    cycle_tasks.process_cycle.run()
    html = bob_client.get("/nodes/").content.decode()
    assert "8 / 8 GPUs" in html and "0 / 8 GPUs" in html and "public pool" in html


def prices(instance_type, per_minute, minutes_ago):
    spec = ResourceSpec.objects.get(instance_type=instance_type)
    now = timezone.now().replace(second=0, microsecond=0)
    PriceHistory.objects.bulk_create(
        PriceHistory(spec=spec, at=now - timedelta(minutes=m), price=Decimal(p), stock_status="WithStock")
        for p, m in zip(per_minute, minutes_ago)
    )


def test_the_spot_market_shows_prices_per_hour_discount_and_stock(bob_client):
    prices("ecs.g7.xlarge", ["0.008250", "0.004950"], [10, 0])  # on-demand 0.0165/min
    html = bob_client.get("/spot/").content.decode()
    row = re.search(r'<tr data-instance-type="ecs.g7.xlarge".*?</tr>', html, re.S)[0]
    assert "0.9900" in row  # on-demand per hour
    assert "0.2970" in row  # the current market price per hour
    assert "30%" in row and "saves 70%" in row and "WithStock" in row


def test_the_history_price_chart_partial_holds_a_plotly_figure_for_the_range(bob_client):
    prices("ecs.g7.xlarge", ["0.005300", "0.004240", "0.003180"], [60 * 24 * 2, 60, 0])
    one_day = bob_client.get("/spot/ecs.g7.xlarge/history/?range=1d", HTTP_HX_REQUEST="true").content.decode()
    three_days = bob_client.get("/spot/ecs.g7.xlarge/history/?range=3d", HTTP_HX_REQUEST="true").content.decode()
    figure = lambda html: json.loads(re.search(r'<script id="fig-\d+-\dd" type="application/json">(.*?)</script>', html, re.S)[1])  # noqa: E731
    # 1 day: the price held from before the window, then the two recent ticks.
    assert [round(y, 4) for y in figure(one_day)["data"][0]["y"]] == [0.318, 0.2544, 0.1908]
    assert len(figure(three_days)["data"][0]["y"]) == 3
    assert 'class="on">3 days' in three_days
    for label in ("1 day", "3 days", "7 days"):
        assert label in one_day


def test_htmx_and_plotly_come_from_our_own_static_files(bob_client):
    html = bob_client.get("/spot/").content.decode()
    assert "/static/console/vendor/htmx.min.js" in html and "/static/console/vendor/plotly.min.js" in html
    assert "cdn" not in html.lower() and "https://" not in html


DECEMBER = "?from=2026-12-01&to=2026-12-31"


def bill(job, day, pay_type, amount, on_demand):
    DailyBill.of(job, spec=job.specs.get().spec, day=day, pay_type=pay_type, minutes=60, amount=Decimal(amount),
                 on_demand_amount=Decimal(on_demand)).save()


def test_billing_shows_the_workspaces_bills_with_tags_savings_and_totals(bob_client, alice):
    job = spot_job(alice, "cheap")
    bill(job, date(2026, 12, 1), "spot", "1.20", "4.00")
    other = quota_job(alice, "vision", quota="cv-team", workspace="vision-lab")
    bill(other, date(2026, 12, 1), "postpaid", "9.00", "9.00")
    html = bob_client.get("/billing/" + DECEMBER).content.decode()
    assert "acs:pai:dlc:payType=spot" in html and "cheap" in html and "vision" not in html
    assert "2.80" in html  # savings


def test_the_csv_export_is_a_real_csv_download_of_the_workspaces_bills(bob_client, alice):
    job = spot_job(alice, "cheap")
    bill(job, date(2026, 12, 1), "spot", "1.200000", "4.000000")
    bill(job, date(2026, 12, 2), "spot", "0.500000", "2.000000")
    response = bob_client.get("/billing/export.csv" + DECEMBER)
    assert response["Content-Type"].startswith("text/csv")
    assert 'attachment; filename="opendlc-bills-ml-research.csv"' == response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["day", "job_id", "job_name", "instance_type", "tag", "minutes", "amount", "pay_as_you_go_amount", "savings"]
    assert rows[1] == ["2026-12-02", job.job_id, "cheap", "ecs.g7.xlarge", "acs:pai:dlc:payType=spot", "60", "0.500000", "2.000000", "1.500000"]
    assert len(rows) == 3


@pytest.mark.parametrize("name", ["=HYPERLINK(\"http://x\")", "+1", "-2+3", "@SUM(A1)"])
def test_a_job_name_a_spreadsheet_would_run_as_a_formula_is_exported_as_text(bob_client, alice, name):
    job = spot_job(alice, "cheap")
    Job.objects.filter(pk=job.pk).update(display_name=name)
    bill(job, date(2026, 12, 1), "spot", "1.200000", "4.000000")
    rows = list(csv.reader(io.StringIO(bob_client.get("/billing/export.csv" + DECEMBER).content.decode())))
    assert rows[1][2] == "'" + name and rows[1][8] == "2.800000"  # numbers stay numbers


def test_charlie_exports_an_empty_csv(charlie_client, alice):
    bill(spot_job(alice, "cheap"), date(2026, 12, 1), "spot", "1.2", "4")
    assert len(charlie_client.get("/billing/export.csv" + DECEMBER).content.decode().splitlines()) == 1


def test_an_access_key_secret_is_shown_once(bob_client, bob):
    created = bob_client.post("/access-keys/create/", follow=True).content.decode()
    key = AccessKey.objects.get(user=bob)
    assert key.secret in created and key.access_key_id in created
    listing = bob_client.get("/access-keys/").content.decode()
    assert key.access_key_id in listing and key.secret not in listing


def test_creating_a_key_redirects_so_a_reload_creates_none_and_shows_the_secret_no_more(bob_client, bob):
    response = bob_client.post("/access-keys/create/")
    assert (response.status_code, response["Location"]) == (302, "/access-keys/created/")
    first = bob_client.get("/access-keys/created/")
    key = AccessKey.objects.get(user=bob)
    assert key.secret in first.content.decode() and first["Cache-Control"] == "no-store"
    reload = bob_client.get("/access-keys/created/", follow=True).content.decode()
    assert AccessKey.objects.filter(user=bob).count() == 1
    assert key.secret not in reload and "shown only once" in reload


def test_the_export_block_names_the_workspace_the_console_is_in(bob_client, bob):
    html = bob_client.post("/access-keys/create/", follow=True).content.decode()
    research = bob.memberships.get(workspace__name="ml-research").workspace_id
    assert f"export OPENDLC_WORKSPACE_ID={research}" in html


def test_keys_are_disabled_and_deleted_only_by_their_owner(bob_client, charlie, client, bob):
    key, _ = AccessKey.issue(bob)
    client.force_login(charlie)
    assert client.post(f"/access-keys/{key.access_key_id}/disable/").status_code == 404
    assert client.post(f"/access-keys/{key.access_key_id}/delete/").status_code == 404
    client.force_login(bob)
    client.post(f"/access-keys/{key.access_key_id}/disable/")
    key.refresh_from_db()
    assert key.status == "Disabled"
    client.post(f"/access-keys/{key.access_key_id}/delete/")
    assert not AccessKey.objects.filter(pk=key.pk).exists()


# --- Nodes: cordon, uncordon, drain --------------------------------------------------------------

NLP_0 = "nlp-team-gn6v-c8g1-0"


def test_a_quota_admin_cordons_and_uncordons_a_node_from_the_nodes_page(alice_client):
    html = alice_client.get("/nodes/").content.decode()
    assert f'action="/nodes/{NLP_0}/operate"' in html and "csrfmiddlewaretoken" in html
    response = alice_client.post(f"/nodes/{NLP_0}/operate", {"operation": "Cordon"}, follow=True)
    assert Node.objects.get(name=NLP_0).cordoned
    assert "is cordoned: it takes no new pods" in response.content.decode()
    alice_client.post(f"/nodes/{NLP_0}/operate", {"operation": "Uncordon"})
    assert not Node.objects.get(name=NLP_0).cordoned


def test_draining_from_the_nodes_page_stops_the_nodes_pods(alice_client, alice):
    job = quota_job(alice, pods=1)
    cycle_tasks.process_cycle.run()
    node = job.pods.get().node.name
    alice_client.post(f"/nodes/{node}/operate", {"operation": "Drain"})
    assert job.pods.get().reason_code == "NodeDrained" and Node.objects.get(name=node).cordoned


def test_a_member_sees_no_node_buttons_and_may_not_operate_a_node(bob_client):
    html = bob_client.get("/nodes/").content.decode()
    assert "/operate" not in html
    response = bob_client.post(f"/nodes/{NLP_0}/operate", {"operation": "Cordon"}, follow=True)
    assert "needs a staff user or an owner/admin" in response.content.decode()
    assert not Node.objects.get(name=NLP_0).cordoned


def test_someone_in_no_workspace_sees_no_node_and_cannot_operate_one(charlie_client):
    assert "No nodes registered." in charlie_client.get("/nodes/").content.decode()
    assert charlie_client.post(f"/nodes/{NLP_0}/operate", {"operation": "Cordon"}).status_code == 404
    assert not Node.objects.get(name=NLP_0).cordoned


def test_the_node_form_is_refused_without_its_csrf_token(alice):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    assert browser.post(f"/nodes/{NLP_0}/operate", {"operation": "Cordon"}).status_code == 403
    assert not Node.objects.get(name=NLP_0).cordoned


@pytest.mark.parametrize("model", ["job", "pod", "restartrecord"])
def test_the_django_admin_cannot_add_change_or_delete_jobs_or_pods(admin_client, alice, model):
    job = quota_job(alice)
    from jobs.models import Pod, RestartRecord

    obj = {"job": job, "pod": Pod.objects.filter(job=job).first(), "restartrecord": RestartRecord.objects.create(job=job, cause="Failure")}[model]
    base = f"/admin/jobs/{model}/"
    assert admin_client.get(base).status_code == 200  # it is still shown
    assert admin_client.get(f"{base}add/").status_code == 403
    assert admin_client.post(f"{base}add/", {}).status_code == 403
    page = admin_client.get(f"{base}{obj.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert admin_client.post(f"{base}{obj.pk}/change/", {}).status_code == 403
    assert admin_client.post(f"{base}{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


def test_an_admin_sets_a_quotas_backfill_and_fair_share_weight_in_the_quota_form(alice_client):
    quota = Quota.objects.get(name="llm-finetune")
    html = alice_client.get(f"/quotas/{quota.quota_id}/edit/").content.decode()
    assert "checked" not in re.search(r'<input[^>]*name="backfill"[^>]*>', html)[0]  # off by default
    assert 'value="1.00"' in re.search(r'<input[^>]*name="weight"[^>]*>', html)[0]
    response = alice_client.post(f"/quotas/{quota.quota_id}/edit/", {
        "name": quota.name, "resource_type": "Lingjun", "queue_strategy": "BestEffort",
        "min_runtime_before_preemption_s": "0", "weight": "2.5", "backfill": "on", "nodes": [],
    })
    assert response.status_code == 302
    quota.refresh_from_db()
    assert (quota.backfill, quota.weight) == (True, Decimal("2.5"))


def test_a_weight_of_zero_is_refused_next_to_its_field(alice_client):
    quota = Quota.objects.get(name="llm-finetune")
    response = alice_client.post(f"/quotas/{quota.quota_id}/edit/", {
        "name": quota.name, "resource_type": "Lingjun", "queue_strategy": "BestEffort",
        "min_runtime_before_preemption_s": "0", "weight": "0", "backfill": "on", "nodes": [],
    })
    assert response.status_code == 200
    assert "greater than or equal to 0.01" in response.content.decode()
    quota.refresh_from_db()
    assert quota.weight == Decimal(1)
