"""Celery tasks of notifications: thin wrappers over notify/delivery.py.

    notify.deliver     queue 'default'   one attempt at a delivery; a transient error (no connection, a
                                         timeout, 408/429/5xx, SMTP) retries it with exponential backoff
                                         and jitter, up to OPENDLC_WEBHOOK_MAX_ATTEMPTS attempts
    notify.redeliver   beat              deliveries overdue because their message was lost

The retry's countdown is the one delivery.backoff chose and wrote as the delivery's next_attempt_at,
rather than one Celery draws itself (retry_backoff): an attempt is claimed only when due, so a
message the broker delivers twice (Redis redelivers a countdown message held past its visibility
timeout) sends nothing twice.
"""

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from notify import delivery


@shared_task(bind=True, name="notify.deliver", ignore_result=True, autoretry_for=(OperationalError,),
             retry_backoff=True, retry_backoff_max=60, max_retries=2 * settings.OPENDLC_WEBHOOK_MAX_ATTEMPTS)
def deliver(self, delivery_pk: int) -> None:
    wait = delivery.attempt(delivery_pk)
    if wait is not None:
        raise self.retry(countdown=wait)


@shared_task(name="notify.redeliver", ignore_result=True)
def redeliver() -> int:
    overdue = delivery.overdue()
    for pk in overdue:
        deliver.delay(pk)
    return len(overdue)
