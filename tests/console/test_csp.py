"""The Content-Security-Policy: the console runs only its own static files, and every page works
under it in Chromium (no violation reported, charts drawn, bars sized, confirmations asked)."""

import re
from pathlib import Path

import pytest
from django.conf import settings

from tests.console.conftest import quota_job
from tests.console.test_browser import WAIT_MS, browser, login  # noqa: F401 (fixture)

TEMPLATES = Path(settings.BASE_DIR) / "templates"


def test_the_policy_allows_only_the_consoles_own_scripts_and_styles(client, alice):
    client.force_login(alice)
    policy = client.get("/jobs/")["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    assert directives["script-src"] == "'self'"
    # Besides its files, only Plotly's two <style> elements, by their hashes (console/settings.py).
    assert directives["style-src"] == ("'self' 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=' "
                                       "'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o='")
    assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy


@pytest.mark.parametrize("template", sorted(TEMPLATES.rglob("*.html")), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_no_template_carries_inline_script_handlers_or_styles(template):
    html = template.read_text()
    # A JSON data block (json_script) is data, not code; any other <script> must load a file.
    scripts = [s for s in re.findall(r"<script\b[^>]*>", html) if "src=" not in s and "application/json" not in s]
    assert scripts == []
    assert re.findall(r"""\s(on[a-z]+|style|hx-on[:\w-]*)\s*=""", html) == []


@pytest.fixture
def strict_page(browser, live_server):  # noqa: F811
    """A page under the console's own policy (test_browser's pages bypass it for their waits)."""
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    context.close()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_every_console_page_works_without_a_policy_violation(strict_page, demo_cluster, alice):
    page = strict_page
    job = quota_job(alice, "csp-check")
    violations = []
    page.on("console", lambda m: violations.append((page.url, m.text, m.location.get("url"), m.location.get("lineNumber")))
            if "Content Security Policy" in m.text else None)
    login(page, "alice")
    for path in ("/jobs/", f"/jobs/{job.job_id}/", "/jobs/create/", "/quotas/", "/nodes/",
                 "/spot/?spec=ecs.gn7i-c8g1.2xlarge", "/usage/", "/billing/", "/access-keys/"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
    assert violations == []

    page.goto("/usage/")
    page.wait_for_selector("[data-figure] svg.main-svg")  # Plotly drew under the policy
    page.goto("/quotas/")
    widths = page.eval_on_selector_all(".bar span[data-width]", "els => els.map(e => e.style.width)")
    assert widths and all(w.endswith("%") for w in widths)

    page.goto(f"/jobs/{job.job_id}/")
    asked = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.click("button.danger")
    assert asked == ["Stop csp-check?"]
    job.refresh_from_db()
    assert job.status != "Stopped"  # dismissed: nothing was posted
    assert violations == []
