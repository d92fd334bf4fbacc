"""Billing, Access Keys, Spot Market and the quota form in Chromium, as a user reads them (#28)."""

from decimal import Decimal

import pytest

from tests.console.test_browser import browser, element_shot, login, page, settle, shot  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def overflows(page, selector) -> bool:  # noqa: F811
    """Whether the element is wider than its box shows (a table running past the page's edge)."""
    return page.evaluate(f"(() => {{ const e = document.querySelector({selector!r}); return e.scrollWidth > e.clientWidth; }})()")


@pytest.fixture
def market_prices(demo_cluster):
    """A day of hourly prices for every public pool, and a local machine's type (no on-demand price)
    in the public pool."""
    from quotas.models import Node, ResourceSpec
    from spot.backfill import backfill_history

    local = ResourceSpec.objects.create(instance_type="local.c8m16g0", cpu=8, memory_mib=16384,
                                        on_demand_price_per_minute=Decimal("0"))
    Node.objects.create(name="workstation", spec=local)
    backfill_history(days=1, step_minutes=60)


# --- Spot Market --------------------------------------------------------------------------------

def test_the_spot_market_fits_1280_pixels_and_explains_discount_and_stock(page, market_prices):  # noqa: F811
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, "alice")
    page.goto("/spot/")
    table = page.locator("table.market-table")
    assert "price as % of on-demand" in table.locator("thead").inner_text()
    row = page.locator('tr[data-instance-type="ecs.g7.xlarge"]')
    shown, saving = row.locator("td.discount").inner_text().split("\n")
    assert int(shown.rstrip("%")) + int(saving.removeprefix("saves ").rstrip("%")) == 100
    assert "reserve kept for pay-as-you-go" in page.locator(".stock-legend").inner_text()
    assert row.locator(".badge").get_attribute("title")
    # The local type is named apart, not listed at 0.0000.
    assert page.locator('tr[data-instance-type="local.c8m16g0"]').count() == 0
    assert "local.c8m16g0" in page.locator(".unpriced").inner_text()
    assert "0.0000" not in table.inner_text()
    shot(page, "spot-market-1280")
    assert not overflows(page, "main") and not overflows(page, "#market section.card")


def test_the_history_price_chart_follows_the_row_chosen(page, market_prices):  # noqa: F811
    login(page, "alice")
    page.goto("/spot/")
    first = page.locator("table.market-table tbody tr").first
    assert "selected" in first.get_attribute("class")
    page.evaluate("window.notReloaded = true")
    page.locator('tr[data-instance-type="ecs.gn7i-c8g1.2xlarge"] a', has_text="History Price").click()
    page.locator('tr.selected[data-instance-type="ecs.gn7i-c8g1.2xlarge"]').wait_for()
    settle(page)
    assert page.locator("table.market-table tr.selected").count() == 1
    assert page.locator("#price-chart .chart-head").inner_text().startswith("ecs.gn7i-c8g1.2xlarge")
    page.locator("#price-chart .main-svg").first.wait_for()
    assert page.evaluate("window.notReloaded === true")
    assert page.url.endswith("/spot/?spec=ecs.gn7i-c8g1.2xlarge")
    shot(page, "spot-market-chart-follows-row")


# --- Billing ------------------------------------------------------------------------------------

def test_billing_shows_a_range_of_days_by_user_and_quota_and_says_why_a_range_is_empty(page, alice, bob):  # noqa: F811
    from datetime import date

    from tests.console.conftest import spot_job
    from tests.console.test_admin_pages import bill

    bill(spot_job(alice, "alice-spot"), date(2026, 11, 20), "spot", "2.000000", "5.000000")
    bill(spot_job(bob, "bob-spot"), date(2026, 11, 21), "spot", "0.500000", "1.500000")
    login(page, "alice")
    page.goto("/billing/")
    page.fill("#id_from", "2026-11-01")
    page.fill("#id_to", "2026-11-30")
    page.click("#billing-range button")
    page.wait_for_url("**/billing/?from=2026-11-01&to=2026-11-30")
    assert page.locator("#billing-by-user tbody tr").first.inner_text().split() == ["alice", "60", "2.00", "5.00", "3.00"]
    assert "No quota (public pool" in page.locator("#billing-by-quota").inner_text()
    assert page.locator("#billing-bills tbody tr").count() == 2
    shot(page, "billing")

    page.fill("#id_from", "2026-10-01")
    page.fill("#id_to", "2026-10-31")
    page.click("#billing-range button")
    page.wait_for_url("**/billing/?from=2026-10-01&to=2026-10-31")
    empty = page.locator("#billing-empty").inner_text()
    assert "No bills in ml-research from 2026-10-01 to 2026-10-31." in empty and "prepaid" in empty
    shot(page, "billing-empty")


# --- Quota form ---------------------------------------------------------------------------------

def test_the_quota_form_shows_each_node_with_its_gpus_vcpus_and_memory(page, demo_cluster):  # noqa: F811
    login(page, "alice")
    page.goto("/quotas/new/")
    v100 = page.locator('.node-choices label[data-node="pub-gn6v-c8g1-0"]')
    assert v100.inner_text().split("\n") == ["pub-gn6v-c8g1-0", "ecs.gn6v-c8g1.16xlarge · 8 × NVIDIA V100 · 64 vCPUs · 256 GiB"]
    cpu_only = page.locator('.node-choices label[data-node="pub-g7-0"]')
    assert "no GPU · 4 vCPUs · 16 GiB" in cpu_only.inner_text()
    element_shot(page.locator(".node-choices"), "quota-form-nodes")


def test_the_quota_forms_scheduling_settings_are_backfill_off_and_weight_1_and_refuse_a_weight_of_0(
        page, demo_cluster):  # noqa: F811
    from quotas.models import Quota

    quota = Quota.objects.get(name="llm-finetune")
    login(page, "alice")
    page.goto(f"/quotas/{quota.quota_id}/edit/")
    assert not page.get_by_label("Backfill behind a reservation").is_checked()
    weight = page.get_by_label("Fair-share weight")
    assert weight.input_value() == "1.00"
    weight.fill("0")
    page.get_by_role("button", name="Save").click()
    settle(page)
    section = page.locator("section.card", has_text="Scheduling")
    assert "greater than or equal to 0.01" in section.inner_text()
    element_shot(section, "quota-form-scheduling")


# --- Access Keys --------------------------------------------------------------------------------

def test_reloading_the_created_key_page_creates_no_key_and_the_export_block_names_the_workspace(page, alice):  # noqa: F811
    from apikit.models import AccessKey

    research = alice.memberships.get(workspace__name="ml-research").workspace_id
    keys_before = AccessKey.objects.filter(user=alice).count()
    login(page, "alice")
    page.goto("/access-keys/")
    page.click("button:has-text('Create AccessKey')")
    page.wait_for_url("**/access-keys/created/")
    key = AccessKey.objects.get(user=alice, access_key_id=page.locator("#access-key-id").inner_text())
    assert page.locator("#access-key-export").inner_text().split("\n") == [
        f"export ALIBABA_CLOUD_ACCESS_KEY_ID={key.access_key_id}",
        f"export ALIBABA_CLOUD_ACCESS_KEY_SECRET={key.secret}",
        f"export OPENDLC_WORKSPACE_ID={research}",
    ]
    shot(page, "access-key-created")
    page.reload()
    page.wait_for_url("**/access-keys/")
    assert AccessKey.objects.filter(user=alice).count() == keys_before + 1
    assert "shown only once" in page.locator("ul.messages").inner_text()
    assert key.secret not in page.content()
    shot(page, "access-key-created-reloaded")


# --- Prices per hour ----------------------------------------------------------------------------

def test_a_bidding_jobs_waiting_reason_and_a_refused_price_limit_speak_per_hour(page, alice):  # noqa: F811
    from django.utils import timezone

    from cycle import tasks as cycle_tasks
    from quotas.models import ResourceSpec
    from spot.models import PriceHistory
    from tests.console.conftest import spot_job

    g7 = ResourceSpec.objects.get(instance_type="ecs.g7.xlarge")  # on-demand 0.99 /h
    PriceHistory.objects.create(spec=g7, at=timezone.now() - timezone.timedelta(minutes=1), price=g7.on_demand_price_per_minute * Decimal("0.6"))
    job = spot_job(alice, "cheap-bid", discount="0.3")
    cycle_tasks.process_cycle.run()
    login(page, "alice")
    page.goto(f"/jobs/{job.job_id}/")
    assert "bid 0.2970 /h is below the market price 0.5940 /h of ecs.g7.xlarge" in page.locator(".waiting").inner_text()
    shot(page, "job-waiting-reason-per-hour")

    page.goto("/jobs/create/")
    page.locator("label.radio", has_text="Preemptible Resources").first.click()
    settle(page)
    page.select_option("#id_roles-0-spec", "ecs.g7.xlarge")
    settle(page)
    page.check("#id_roles-0-bid_kind_1")  # Price limit
    page.fill("#id_display_name", "too-dear")
    page.fill("#id_image", "pytorch:2.3-gpu")
    page.fill("#id_user_command", "python train.py")
    page.fill("#id_roles-0-bid_price_limit", "1.2")
    settle(page)
    page.click("button[value=submit]")
    error = page.locator("#id_roles-0-bid_price_limit-error")
    error.wait_for()
    assert "within the market range 0.0990 /h to 0.9900 /h, got 1.2000 /h" in error.inner_text()
    element_shot(page.locator("table.roles"), "create-job-price-limit-per-hour")
