"""Retries: exponential backoff with jitter up to a cap, one attempt per due time however many
messages the broker hands out, and a reconcile task for the messages it lost."""

from datetime import timedelta

import pytest
from django.utils import timezone

from notify import delivery, services, tasks
from notify.models import Delivery, DeliveryStatus
from quotas.models import Workspace
from tests.notify.conftest import run

pytestmark = pytest.mark.django_db


@pytest.fixture
def failing_receiver(alice, receiver, settings):
    settings.OPENDLC_WEBHOOK_ALLOW_PRIVATE = True
    receiver.codes = [503] * 20
    research = Workspace.objects.get(name="ml-research")
    services.create_subscription(alice, research, channel="webhook", target=receiver.url, chosen=["Running"])
    return receiver


def test_the_backoff_doubles_with_jitter_up_to_its_cap():
    for attempts, ceiling in [(1, 30), (2, 60), (3, 120), (8, 3600), (20, 3600)]:
        waits = [delivery.backoff(attempts) for _ in range(50)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert len(set(waits)) > 1  # jittered


def test_a_failed_attempt_waits_its_backoff_and_a_second_message_sends_nothing_meanwhile(job, failing_receiver):
    run(job)  # the test's transaction never commits: the delivery waits, queued
    pk = Delivery.objects.get().pk
    now = timezone.now()
    wait = delivery.attempt(pk, now)
    assert 15 <= wait <= 30 and len(failing_receiver.received) == 1
    assert delivery.attempt(pk, now + timedelta(seconds=5)) is None  # the broker's duplicate, early
    assert len(failing_receiver.received) == 1
    assert delivery.attempt(pk, now + timedelta(seconds=wait)) is not None
    row = Delivery.objects.get()
    assert len(failing_receiver.received) == 2 and (row.status, row.attempts, row.response_code) == (
        DeliveryStatus.RETRYING, 2, 503)


def test_a_lost_message_is_sent_again_by_the_reconcile_task(job, failing_receiver, monkeypatch):
    run(job)
    pk = Delivery.objects.get().pk
    Delivery.objects.filter(pk=pk).update(next_attempt_at=timezone.now() - timedelta(minutes=10))
    sent = []
    monkeypatch.setattr(tasks.deliver, "delay", sent.append)
    assert tasks.redeliver() == 1 and sent == [pk]
    Delivery.objects.filter(pk=pk).update(status=DeliveryStatus.SUCCEEDED)
    assert tasks.redeliver() == 0
