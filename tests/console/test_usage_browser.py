"""The Usage page in Chromium: the charts draw, and choosing another range redraws them with its figures."""

from datetime import datetime, timedelta, timezone

import pytest

from jobs.models import PodKind
from tests.console.test_browser import SHOTS, browser, login, page  # noqa: F401  (fixtures)
from tests.console.test_usage_page import ran

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_usage_page_draws_its_charts_and_follows_the_chosen_range(page, alice, bob):  # noqa: F811
    today = datetime.now(timezone.utc).date()
    ran(alice, "ml-research", "nlp-team", 8, 2)  # on 2 March 2026, long before the default range
    recent = ran(bob, "ml-research", None, 2, 3, kind=PodKind.SPOT, source="spot")
    started = datetime.combine(today - timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc)
    recent.pods.update(started_at=started, finished_at=started + timedelta(hours=3))

    login(page, "alice")
    page.click("nav.sidenav >> text=Usage")
    page.wait_for_url("**/usage/")
    assert page.input_value("#id_from") == (today - timedelta(days=6)).isoformat()
    page.wait_for_selector("#usage-sources .plot .main-svg")
    assert page.locator("#usage-users tbody tr").first.inner_text().split() == [
        "bob", "0.00", "0.00", "6.00", "0.00", "6.00"]

    page.fill("#id_from", "2026-03-01")
    page.fill("#id_to", "2026-03-03")
    page.click("#usage-range button")
    page.wait_for_url("**/usage/?from=2026-03-01&to=2026-03-03")
    page.wait_for_selector("#usage-workspaces .plot .main-svg")
    assert page.locator("#usage-users tbody tr").first.inner_text().split() == [
        "alice", "16.00", "0.00", "0.00", "0.00", "16.00"]
    bars = page.locator("#usage-quotas .plot g.point").count()
    assert bars >= 1  # the chart drew nlp-team's bar
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "usage.png"), full_page=True)
