"""The console in a real browser (Debian's chromium via Playwright), as a user would use it.

The scheduler and the agents are driven from the test: a schedule cycle admits jobs and pod
reports make them run, while the page updates itself through its HTMX polling.
"""

import os
import re
from pathlib import Path

import pytest
from django.conf import settings

from cycle import tasks as cycle_tasks
from jobs import lifecycle
from jobs.models import Job
from tests.console.conftest import quota_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
SHOTS = Path(settings.BASE_DIR) / "artifacts" / "screenshots"
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "Debian's chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the test body
    # are still synchronous and safe.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def page(browser, live_server):
    # These tests wait on page conditions that Playwright evaluates as strings, which the console's
    # Content-Security-Policy forbids; tests/console/test_csp.py runs pages under the policy.
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 1000}, bypass_csp=True)
    context.add_init_script(HTMX_TRACKER)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    context.close()


def login(page, username):
    page.goto("/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "opendlc-demo")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/jobs/$"))


# Counts HTMX requests from their start (fired inside the change/click handler, so before the
# Playwright action returns) to the end of their swap and settle: a test acting on the old form
# while its replacement is on the way would lose the change.
HTMX_TRACKER = """
window.__htmxPending = 0;
document.addEventListener('htmx:beforeRequest', () => { window.__htmxPending += 1; });
document.addEventListener('htmx:afterSettle', () => { window.__htmxPending = Math.max(0, window.__htmxPending - 1); });
document.addEventListener('htmx:afterRequest', (e) => { if (!e.detail.successful) window.__htmxPending = Math.max(0, window.__htmxPending - 1); });
"""


def settle(page):
    """Wait until no HTMX request is in flight, swapping or settling (a form refresh replaces the fields)."""
    page.wait_for_function(
        "window.__htmxPending === 0 && !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')"
    )


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def element_shot(locator, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    locator.screenshot(path=str(SHOTS / f"{name}.png"))


def choose(page, label_text):
    page.locator("label.radio", has_text=label_text).first.click()
    settle(page)


def test_an_acceptable_quota_job_goes_running_in_quota_without_a_reload(page, demo_cluster):
    login(page, "alice")
    page.goto("/jobs/create/")
    choose(page, "Acceptable")
    page.select_option("#id_quota", label="nlp-team")
    page.select_option("#id_roles-0-spec", "ecs.gn6v-c8g1.16xlarge")
    settle(page)
    page.fill("#id_display_name", "bert-acceptable")
    page.fill("#id_image", "pytorch:2.3-gpu")
    page.fill("#id_user_command", "python train.py --epochs 3")
    page.fill("#id_envs", "EPOCHS=3")
    page.check("#id_ft_enabled")
    settle(page)
    page.wait_for_selector("text=Modify Configuration")
    shot(page, "create-job-form")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/dlc\w+/$"))
    job = Job.objects.get(display_name="bert-acceptable")
    assert job.oversold_type == "AcceptQuotaOverSold" and job.ft_enabled

    page.goto("/jobs/")
    row = page.locator(f"#job-{job.job_id}")
    assert row.locator(".badge").first.inner_text() == "Queuing"
    page.evaluate("window.notReloaded = true")
    cycle_tasks.process_cycle.run()
    lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Running"} for p in job.pods.all()])
    row.locator(".badge.s-running").wait_for()
    assert row.locator(".badge.inquota").inner_text() == "In Quota"
    assert page.evaluate("window.notReloaded === true")
    shot(page, "jobs-list")


def test_a_quota_job_gives_its_nodes_own_resources_instead_of_a_specification(page, demo_cluster):
    login(page, "alice")
    page.goto("/jobs/create/")
    page.select_option("#id_quota", label="nlp-team")
    page.fill("#id_display_name", "cpu-sweep")
    page.fill("#id_image", "pytorch:2.3-gpu")
    page.fill("#id_user_command", "python sweep.py")
    page.fill("#id_roles-0-gpu", "1")
    page.fill("#id_roles-0-cpu", "8")
    page.fill("#id_roles-0-memory_gib", "32")
    page.select_option("#id_roles-0-spec", "ecs.gn6v-c8g1.16xlarge")  # refreshes the form, keeping the amounts
    settle(page)
    page.click("button[value=submit]")
    error = page.locator("#id_roles-0-spec-error")
    error.wait_for()
    assert "not both" in error.inner_text()
    shot(page, "create-job-own-resources-both")
    page.select_option("#id_roles-0-spec", "")
    settle(page)
    assert page.input_value("#id_roles-0-memory_gib") == "32"
    shot(page, "create-job-own-resources")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/dlc\w+/$"))
    assert "Worker × 1 1 GPU · 8 vCPU · 32 GiB each" in page.locator("#job-live dl.facts").inner_text()
    spec = Job.objects.get(display_name="cpu-sweep").specs.get()
    assert (spec.spec, spec.gpu, spec.cpu, spec.memory_mib) == (None, 1, 8, 32 * 1024)


def test_a_lingjun_spot_job_without_a_vpc_is_refused_inline_then_bids(page, demo_cluster):
    login(page, "alice")
    page.goto("/jobs/create/")
    choose(page, "Lingjun AI Computing Service")
    choose(page, "Preemptible Resources")
    assert page.locator("text=Idle Resources").count() == 0
    page.select_option("#id_roles-0-spec", "ml.gu7xf.c96m1600.8-gu108")
    settle(page)
    page.select_option("#id_roles-0-bid_discount", label="30%")
    page.fill("#id_display_name", "llm-spot")
    page.fill("#id_image", "pytorch:2.3-gpu")
    page.fill("#id_user_command", "torchrun train.py")
    page.click("button[value=submit]")
    error = page.locator("#field-vpc_id .field-error")
    error.wait_for()
    assert "required for a spot job on Lingjun" in error.inner_text()
    assert not Job.objects.exists()
    page.fill("#id_vpc_id", "vpc-0jlq8l7qech3m2ta2")
    page.fill("#id_switch_id", "vsw-0jlc46eg4k3pivwpz8")
    page.fill("#id_security_group_id", "sg-0jl4bd9wwh5auei9")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/dlc\w+/$"))
    assert page.locator("#job-live .badge.s-bidding").first.inner_text() == "Bidding"
    assert Job.objects.get().specs.get().spot_discount_limit * 100 == 30


def test_a_borrowing_pod_turns_resource_preempted_when_the_lender_submits(page, demo_cluster, alice, bob):
    quota_job(alice, "fill-nlp", pods=2)
    borrower = quota_job(bob, "borrower", pods=2, oversold="ForceQuotaOverSold")
    cycle_tasks.process_cycle.run()
    lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Running"} for p in borrower.pods.all()])
    login(page, "bob")
    page.goto(f"/jobs/{borrower.job_id}/")
    assert page.locator("#job-live .badge.idle").first.inner_text() == "Not in Quota"
    assert page.locator("text=idle resources").count() >= 2
    page.evaluate("window.notReloaded = true")

    quota_job(alice, "lender", quota="cv-team", workspace="vision-lab", pods=2)  # cv-team wants its nodes back
    cycle_tasks.process_cycle.run()
    lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Failed", "exit_code": 143} for p in borrower.pods.all()])
    page.locator(".badge.preempted").nth(1).wait_for()
    assert page.locator(".badge.preempted").first.inner_text() == "Resource Preempted"
    assert page.evaluate("window.notReloaded === true")
    shot(page, "job-detail-preempted")


def test_history_price_draws_the_plotly_chart(page, demo_cluster):
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from quotas.models import ResourceSpec
    from spot.models import PriceHistory

    spec = ResourceSpec.objects.get(instance_type="ml.gu7xf.c96m1600.8-gu108")
    now = timezone.now().replace(second=0, microsecond=0)
    ratios = [0.35 + 0.25 * ((m // 90) % 4) / 3 for m in range(0, 3 * 24 * 60, 15)]
    PriceHistory.objects.bulk_create(
        PriceHistory(spec=spec, at=now - timedelta(minutes=15 * i), price=(spec.on_demand_price_per_minute * Decimal(str(round(r, 3)))).quantize(Decimal("0.000001")))
        for i, r in enumerate(ratios)
    )
    login(page, "alice")
    page.goto("/jobs/create/")
    choose(page, "Lingjun AI Computing Service")
    choose(page, "Preemptible Resources")
    page.select_option("#id_roles-0-spec", spec.instance_type)
    settle(page)
    page.click("a.history-price")
    page.locator("#price-dialog .main-svg").first.wait_for()
    page.locator("#price-dialog .segmented a", has_text="3 days").click()
    page.locator("#price-dialog .segmented a.on", has_text="3 days").wait_for()
    page.locator("#price-dialog .main-svg").first.wait_for()
    assert page.locator("#price-dialog .scatterlayer .trace").count() >= 1
    shot(page, "history-price-chart")


def seed_spike(instance_type, now):
    """Two days at 30 % of on-demand but 70 % for the two hours from 10 hours before ``now``."""
    from datetime import timedelta
    from decimal import Decimal

    from quotas.models import ResourceSpec
    from spot.models import PriceHistory

    spec = ResourceSpec.objects.get(instance_type=instance_type)
    last = now.replace(second=0, microsecond=0)
    rows = [(last - timedelta(minutes=2879), "0.3"), (last - timedelta(minutes=600), "0.7"), (last - timedelta(minutes=480), "0.3")]
    PriceHistory.objects.bulk_create(PriceHistory(spec=spec, at=at, price=spec.on_demand_price_per_minute * Decimal(r))
                                     for at, r in rows)


@pytest.fixture
def advisor_now(monkeypatch):
    """The advisor's windows end at the test's start, however long the browser takes."""
    from types import SimpleNamespace

    from django.utils import timezone

    now = timezone.now()
    monkeypatch.setattr("spot.market_state.timezone", SimpleNamespace(now=lambda: now))
    return now


def advised(page, scope, row, days):
    return page.locator(f'{scope} tr[data-row="{row}"] td[data-days="{days}"]').inner_text()


def test_a_spot_row_advises_a_price_limit_draws_it_on_the_chart_and_submits_it(page, demo_cluster, advisor_now):
    # The figures of tests/console/test_bid_advisor.py: a bid of 0.4950 an hour on ecs.g7.xlarge
    # (on-demand 0.99) is released once by the spike and holds 91.7 % of the last day.
    seed_spike("ecs.g7.xlarge", advisor_now)
    login(page, "alice")
    page.goto("/jobs/create/")
    choose(page, "Preemptible Resources")
    page.select_option("#id_roles-0-spec", "ecs.g7.xlarge")
    settle(page)
    assert "choose a bid" in page.locator("#advice-roles-0").inner_text()
    page.check("#id_roles-0-bid_kind_1")  # Price limit
    assert not page.locator("#id_roles-0-bid_discount").is_visible()
    page.fill("#id_roles-0-bid_price_limit", "0.495")
    page.locator('#advice-roles-0 tr[data-row="held"]').wait_for()
    settle(page)
    assert [advised(page, "#advice-roles-0", "held", d) for d in (1, 7, 30)] == ["91.7%", "95.8%", "95.8%"]
    assert advised(page, "#advice-roles-0", "releases", 1) == "1.00"
    assert advised(page, "#advice-roles-0", "expected", 1) == "0.2970"
    assert advised(page, "#advice-roles-0", "saving", 1) == "0.6930 (70.0%)"
    page.locator("tr.role-row, tr.advice-row").first.scroll_into_view_if_needed()
    element_shot(page.locator("table.roles"), "bid-advisor-create-job")

    page.click("#advice-roles-0 a.history-price")
    page.locator("#price-dialog .legendtext", has_text="Your bid (0.4950 /h)").wait_for()
    element_shot(page.locator("#price-dialog"), "bid-advisor-chart")
    page.click("#price-dialog button[aria-label=Close]")

    page.fill("#id_display_name", "spot-by-price")
    page.fill("#id_image", "pytorch:2.3-gpu")
    page.fill("#id_user_command", "python train.py")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/dlc\w+/$"))
    spec = Job.objects.get(display_name="spot-by-price").specs.get()
    assert (str(spec.spot_price_limit), spec.spot_discount_limit) == ("0.008250", None)  # 0.495 / 60 a minute


def test_the_spot_market_page_advises_a_bid_typed_under_its_chart(page, demo_cluster, advisor_now):
    seed_spike("ecs.g7.xlarge", advisor_now)
    login(page, "alice")
    page.goto("/spot/?spec=ecs.g7.xlarge")
    page.select_option("#price-chart select[name=bid_discount]", label="50%")
    page.locator('#price-chart tr[data-row="held"]').wait_for()
    page.locator("#price-chart .legendtext", has_text="Your bid (0.4950 /h)").wait_for()
    assert advised(page, "#price-chart", "held", 1) == "91.7%"
    element_shot(page.locator("#price-chart"), "bid-advisor-spot-market")


def test_a_waiting_jobs_page_shows_its_estimated_start_with_the_assumptions_on_hover(page, demo_cluster, alice):
    from console import demo

    demo.seed_jobs()  # bert-pretrain takes both of nlp-team's nodes
    cycle_tasks.process_cycle.run()
    lifecycle.apply_reports([{"pod_id": p.pod_id, "status": "Running"}
                             for job in Job.objects.filter(display_name="bert-pretrain") for p in job.pods.all()])
    waiting = quota_job(alice, "bert-next", pods=1)
    cycle_tasks.process_cycle.run()
    login(page, "alice")
    page.goto(f"/jobs/{waiting.job_id}/")
    estimate = page.locator(".waiting .estimate")
    assert re.fullmatch(r"starts in about \d+ min \(estimate\)", estimate.inner_text())
    assert "JobMaxRunningTimeMinutes" in estimate.get_attribute("title")
    shot(page, "job-estimated-start")
