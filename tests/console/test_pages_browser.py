"""Billing, Access Keys, Spot Market and the quota form in Chromium, as a user reads them (#28)."""

import re
from decimal import Decimal

import pytest

from tests.console.test_browser import SHOTS, browser, element_shot, login, page, settle  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def overflows(page, selector) -> bool:
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
