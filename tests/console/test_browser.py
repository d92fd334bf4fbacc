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
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
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
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 1000})
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
