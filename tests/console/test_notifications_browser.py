"""The Notifications page in Chromium: alice subscribes a webhook, copies its secret, sends a test
event, and the delivery log shows it and a job's event reaching the receiver."""

import time

import pytest

from console.celery import app
from notify import signing
from tests.console.conftest import quota_job
from tests.console.test_browser import SHOTS, browser, login, page, settle  # noqa: F401  (fixtures)
from tests.notify.conftest import receiver, run  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def eager():
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def test_alice_subscribes_a_webhook_and_watches_its_deliveries(page, alice, receiver, settings, eager):  # noqa: F811
    settings.OPENDLC_WEBHOOK_ALLOW_PRIVATE = True  # the receiver listens on loopback
    login(page, "alice")
    page.click("nav.sidenav >> text=Notifications")
    page.wait_for_url("**/notifications/")
    page.fill("#id_url", receiver.url)
    page.check("input[name=events][value=Running]")
    page.click("text=Create subscription")
    secret = page.inner_text("#signing-secret")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "notifications-created.png"), full_page=True)

    page.click("text=Back to Notifications")
    page.click("text=Send test event")
    page.wait_for_selector("#delivery-log >> text=Test")
    run(quota_job(alice, "bert-finetune"))
    page.reload()
    page.wait_for_selector("#delivery-log >> text=Running")
    assert [r.json["event"] for r in receiver.received] == ["Test", "Running"]
    assert all(signing.verify(secret, r.body, r.headers["OpenDLC-Signature"], now=int(time.time()))
               for r in receiver.received)
    assert page.locator("#delivery-log .badge", has_text="Succeeded").count() == 2
    page.screenshot(path=str(SHOTS / "notifications.png"), full_page=True)
