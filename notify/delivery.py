"""One attempt at a delivery, and its outcome in the delivery log."""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from notify import events, sender
from notify.models import Channel, Delivery, DeliveryStatus

log = logging.getLogger(__name__)


def attempt(delivery_pk: int, now: datetime | None = None) -> None:
    """Send a delivery once and record the outcome. Raises sender.Transient when another attempt
    is due (the task retries it with backoff); after OPENDLC_WEBHOOK_MAX_ATTEMPTS it is Failed."""
    delivery = Delivery.objects.select_related("subscription").filter(pk=delivery_pk).first()
    if delivery is None or delivery.status in (DeliveryStatus.SUCCEEDED, DeliveryStatus.FAILED):
        return  # deleted with its subscription, or a duplicate message of a finished one
    now = now or timezone.now()
    Delivery.objects.filter(pk=delivery.pk).update(attempts=F("attempts") + 1, last_attempt_at=now)
    delivery.attempts += 1
    try:
        sent = _send(delivery)
    except sender.Transient as e:
        last = delivery.attempts >= settings.OPENDLC_WEBHOOK_MAX_ATTEMPTS
        _record(delivery, DeliveryStatus.FAILED if last else DeliveryStatus.RETRYING, e.code, str(e))
        if not last:
            raise
    except sender.Permanent as e:
        _record(delivery, DeliveryStatus.FAILED, e.code, str(e))
    else:
        _record(delivery, DeliveryStatus.SUCCEEDED, sent.code, "", delivered_at=now)


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


def _record(delivery: Delivery, status: str, code: int | None, error: str, delivered_at=None) -> None:
    Delivery.objects.filter(pk=delivery.pk).update(status=status, response_code=code, last_error=error[:2000],
                                                   delivered_at=delivered_at)
    if status == DeliveryStatus.FAILED:
        log.warning("notification %s to subscription %s failed after %d attempt(s): %s", delivery.uid,
                    delivery.subscription_id, delivery.attempts, error)
