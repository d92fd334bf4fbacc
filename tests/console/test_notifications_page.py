"""The Notifications page: alice (owner) manages her workspace's subscriptions, bob (member) reads
them, charlie (no workspace) and mallory (another tenant) change nothing of alice's."""

import pytest

from console.celery import app
from notify import services
from notify.models import Delivery, Subscription
from quotas.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def research(demo_cluster):
    return Workspace.objects.get(name="ml-research")


@pytest.fixture
def mailbox(alice, research):
    subscription, _ = services.create_subscription(alice, research, channel="email", target="oncall@research.example",
                                                   chosen=["Failed"])
    return subscription


def test_the_nav_links_to_notifications(alice_client):
    assert b'href="/notifications/"' in alice_client.get("/jobs/").content


def test_alice_creates_a_webhook_and_sees_its_secret_once(alice_client, settings):
    settings.OPENDLC_WEBHOOK_ALLOW_PRIVATE = True  # the URL below resolves to no public address here
    response = alice_client.post("/notifications/", {"channel": "webhook", "url": "http://127.0.0.1:9/hook",
                                                     "events": ["Running", "Failed"]})
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    subscription = Subscription.objects.get()
    assert subscription.secret.encode() in response.content
    assert subscription.events == ["Running", "Failed"]
    assert subscription.secret.encode() not in alice_client.get("/notifications/").content


def test_a_loopback_url_is_refused_next_to_the_field(alice_client):
    response = alice_client.post("/notifications/", {"channel": "webhook", "url": "http://127.0.0.1:9/hook",
                                                     "events": ["Failed"]})
    assert response.status_code == 400 and b"loopback" in response.content
    assert b'id="field-url"' in response.content and not Subscription.objects.exists()


def test_no_event_chosen_is_refused_by_name(alice_client):
    response = alice_client.post("/notifications/", {"channel": "email", "email": "oncall@research.example"})
    assert response.status_code == 400 and b"This field is required" in response.content


def test_alice_sends_a_test_event_and_sees_it_in_the_log(alice_client, mailbox, mailoutbox,
                                                         django_capture_on_commit_callbacks):
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = alice_client.post(f"/notifications/{mailbox.pk}/test/")
    finally:
        app.conf.task_always_eager = False
    assert response.status_code == 302 and len(mailoutbox) == 1
    page = alice_client.get("/notifications/").content.decode()
    assert "Test" in page and "Succeeded" in page


def test_the_delivery_log_polls_only_while_a_delivery_is_under_way(alice_client, mailbox):
    assert b'id="delivery-log" hx-get' not in alice_client.get("/notifications/").content
    services.send_test(mailbox.created_by, mailbox.workspace, mailbox.pk)  # queued, never sent here
    partial = alice_client.get("/notifications/", headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<tbody id="delivery-log" hx-get') and "Pending" in partial


def test_alice_deletes_a_subscription(alice_client, mailbox):
    assert alice_client.post(f"/notifications/{mailbox.pk}/delete/").status_code == 302
    assert not Subscription.objects.exists()


def test_bob_sees_the_subscriptions_but_may_not_change_them(bob_client, mailbox):
    page = bob_client.get("/notifications/").content
    assert b"oncall@research.example" in page and b"New subscription" not in page and b"Send test event" not in page
    assert bob_client.post("/notifications/", {"channel": "email", "email": "bob@example.com",
                                               "events": ["Failed"]}).status_code == 403
    assert bob_client.post(f"/notifications/{mailbox.pk}/delete/").status_code == 403
    assert bob_client.post(f"/notifications/{mailbox.pk}/test/").status_code == 403
    assert list(Subscription.objects.all()) == [mailbox] and not Delivery.objects.exists()


def test_charlie_in_no_workspace_sees_nothing_and_changes_nothing(charlie_client, mailbox):
    assert charlie_client.get("/notifications/").status_code == 403
    assert charlie_client.post(f"/notifications/{mailbox.pk}/delete/").status_code == 403
    assert Subscription.objects.filter(pk=mailbox.pk).exists()


def test_mallory_of_another_tenant_cannot_touch_alices_subscription(client, mallory, mailbox):
    client.force_login(mallory)
    assert b"oncall@research.example" not in client.get("/notifications/").content
    assert client.post(f"/notifications/{mailbox.pk}/delete/").status_code == 404
    assert client.post(f"/notifications/{mailbox.pk}/test/").status_code == 404
    assert Subscription.objects.filter(pk=mailbox.pk).exists() and not Delivery.objects.exists()
