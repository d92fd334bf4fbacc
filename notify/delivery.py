"""One attempt at a delivery, its outcome in the delivery log, and when the next one is due.

A delivery is due at next_attempt_at (its creation, then each backoff); notify.tasks.deliver sends
it then, and notify.tasks.redeliver sends again the due ones whose message was lost."""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from notify import events, sender
from notify.models import Channel, Delivery, DeliveryStatus

log = logging.getLogger(__name__)

ACTIVE = (DeliveryStatus.PENDING, DeliveryStatus.RETRYING)
BACKOFF_BASE_S, BACKOFF_MAX_S = 30, 3600
LEASE_S = 60  # an attempt in progress holds its delivery this long (the HTTP timeouts are shorter)
EARLY_S = 2  # a countdown may fire this much early (clocks of two hosts)
OVERDUE_S = 300


def attempt(delivery_pk: int, now: datetime | None = None) -> float | None:
    """Send a delivery once if it is due, and record the outcome. Returns the seconds to wait
    before the next attempt when a transient error calls for one, else None; after
    OPENDLC_WEBHOOK_MAX_ATTEMPTS attempts the delivery is Failed."""
    now = now or timezone.now()
    # The attempt is claimed with a conditional update: a second message for the delivery (the
    # broker redelivers a countdown message it has held past its visibility timeout; the reconcile
    # task re-sends a lost one) finds it not due, or already done, and sends nothing.
    claimed = Delivery.objects.filter(pk=delivery_pk, status__in=ACTIVE,
                                      next_attempt_at__lte=now + timedelta(seconds=EARLY_S)).update(
        attempts=F("attempts") + 1, last_attempt_at=now, next_attempt_at=now + timedelta(seconds=LEASE_S))
    if not claimed:
        return None
    delivery = Delivery.objects.select_related("subscription").get(pk=delivery_pk)
    try:
        sent = _send(delivery)
    except sender.Transient as e:
        if delivery.attempts >= settings.OPENDLC_WEBHOOK_MAX_ATTEMPTS:
            _record(delivery, DeliveryStatus.FAILED, e.code, str(e))
            return None
        wait = backoff(delivery.attempts)
        _record(delivery, DeliveryStatus.RETRYING, e.code, str(e), next_attempt_at=now + timedelta(seconds=wait))
        return wait
    except sender.Permanent as e:
        _record(delivery, DeliveryStatus.FAILED, e.code, str(e))
    else:
        _record(delivery, DeliveryStatus.SUCCEEDED, sent.code, "", delivered_at=now)
    return None


def backoff(attempts: int) -> float:
    """Seconds before attempt `attempts + 1`: doubling from BACKOFF_BASE_S up to BACKOFF_MAX_S, each
    drawn from its upper half (jitter), so that the receivers of one outage are not all called again
    in the same second."""
    ceiling = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempts - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def overdue(now: datetime | None = None) -> list[int]:
    """Deliveries due for more than OVERDUE_S whose message was lost (a worker killed mid-attempt,
    a broker restarted without its data): the reconcile task sends them again."""
    now = now or timezone.now()
    late = now - timedelta(seconds=OVERDUE_S)
    return list(Delivery.objects.filter(status__in=ACTIVE, next_attempt_at__lt=late).values_list("pk", flat=True)[:1000])


def _send(delivery: Delivery) -> sender.Sent:
    subscription = delivery.subscription
    if subscription.channel == Channel.EMAIL:
        subject, text = _email_text(delivery)
        return sender.send_email(subscription.email, subject, text)
    return sender.post_webhook(subscription.url, subscription.secret, delivery.body, event=delivery.event,
                               uid=delivery.uid, allow_private=subscription.allow_private)


def _email_text(delivery: Delivery) -> tuple[str, str]:
    body = events.parse(delivery.body)
    job = body["job"]
    if job is None:
        return (f"[OpenDLC] Test notification for workspace {body['workspace']['name']}",
                "This is a test event: notifications of this workspace reach this address.")
    subject = f"[OpenDLC] Job {job['display_name']} ({job['job_id']}): {delivery.event}"
    text = (f"Job {job['display_name']} ({job['job_id']}) in workspace {body['workspace']['name']} went from "
            f"{job['previous_status']} to {job['status']} at {job['at']}.\n\nReason: {job['reason'] or '-'}\n"
            f"{job['message']}\n")
    return subject, text


def _record(delivery: Delivery, status: str, code: int | None, error: str, **fields) -> None:
    Delivery.objects.filter(pk=delivery.pk).update(status=status, response_code=code, last_error=error[:2000],
                                                   **fields)
    if status == DeliveryStatus.FAILED:
        log.warning("notification %s to subscription %s failed after %d attempt(s): %s", delivery.uid,
                    delivery.subscription_id, delivery.attempts, error)
