"""The console's frame in Chromium: a phone's width, the system's dark theme, long names, the favicon."""

import pytest

from tests.console.conftest import quota_job
from tests.console.test_browser import HTMX_TRACKER, SHOTS, WAIT_MS, browser, login  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}  # an iPhone 12-15's CSS viewport
MAIN_PAGES = ["/jobs/", "/jobs/create/", "/quotas/", "/nodes/", "/spot/", "/usage/", "/billing/", "/access-keys/"]


def new_page(browser, live_server, **context):  # noqa: F811
    context = browser.new_context(base_url=live_server.url, bypass_csp=True, **context)
    context.add_init_script(HTMX_TRACKER)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    return page


@pytest.fixture
def phone(browser, live_server):  # noqa: F811
    page = new_page(browser, live_server, viewport=PHONE, color_scheme="dark")
    yield page
    page.context.close()


def overflow(page) -> int:
    """How many CSS pixels the page is wider than the window: a phone user would have to scroll sideways."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def test_the_main_pages_fit_a_phone_in_the_dark_theme(phone, demo_cluster, alice):
    quota_job(alice, "x" * 128)  # a name as long as allowed, unbroken
    login(phone, "alice")
    job_page = phone.locator("table.grid a[href^='/jobs/dlc']").first.get_attribute("href")
    SHOTS.mkdir(parents=True, exist_ok=True)
    for url in MAIN_PAGES + [job_page]:
        phone.goto(url)
        phone.wait_for_load_state("networkidle")
        name = url.strip("/").replace("/", "-")
        phone.screenshot(path=str(SHOTS / f"phone-dark-{name}.png"), full_page=True)
        assert overflow(phone) <= 0, f"{url} is {overflow(phone)} px wider than a 390 px phone"
        # The system asked for dark: the page's background is dark, its text light.
        background = phone.evaluate("getComputedStyle(document.body).backgroundColor")
        assert luminance(background) < 0.2, f"{url} has a light background {background} in the dark theme"


def test_a_long_name_wraps_instead_of_widening_the_jobs_table(browser, live_server, demo_cluster, alice):  # noqa: F811
    page = new_page(browser, live_server, viewport={"width": 1280, "height": 900})
    job = quota_job(alice, "n" * 128)
    login(page, "alice")
    row = page.locator(f"#job-{job.job_id}")
    table = page.locator("table.grid").first
    card = page.locator(".card", has=table).first
    assert table.bounding_box()["width"] <= card.bounding_box()["width"]
    assert row.bounding_box()["height"] > 40  # the name wrapped onto several lines
    assert overflow(page) <= 0
    page.context.close()


def test_the_light_theme_is_the_default_and_every_page_names_its_favicon(browser, live_server, demo_cluster):  # noqa: F811
    page = new_page(browser, live_server, viewport={"width": 1280, "height": 900}, color_scheme="light")
    login(page, "alice")
    assert luminance(page.evaluate("getComputedStyle(document.body).backgroundColor")) > 0.8
    icon = page.locator("link[rel=icon]").get_attribute("href")
    response = page.request.get(icon)
    assert response.ok and response.headers["content-type"].startswith("image/svg+xml")
    # Browsers that ask for /favicon.ico on their own find it too.
    assert page.request.get("/favicon.ico").ok
    page.context.close()


def luminance(css_color: str) -> float:
    """0 (black) to 1 (white), from a computed 'rgb(r, g, b)'."""
    r, g, b = (int(part) for part in css_color[css_color.index("(") + 1:].rstrip(")").split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255
