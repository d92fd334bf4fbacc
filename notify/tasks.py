"""Celery task of notifications: a thin wrapper over notify.delivery.attempt.

    notify.deliver   queue 'default'   one delivery; retried with exponential backoff and jitter on
                                       transient errors, up to OPENDLC_WEBHOOK_MAX_ATTEMPTS attempts
"""

from celery import shared_task
from django.conf import settings

from notify import delivery, sender


@shared_task(name="notify.deliver", ignore_result=True, autoretry_for=(sender.Transient,), retry_backoff=10,
             retry_backoff_max=3600, retry_jitter=True, max_retries=settings.OPENDLC_WEBHOOK_MAX_ATTEMPTS)
def deliver(delivery_pk: int) -> None:
    delivery.attempt(delivery_pk)
