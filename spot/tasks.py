"""Celery tasks of the spot market: thin wrappers around spot.ticker and spot.bills."""

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from spot import bills, ticker


@shared_task(name="spot.tasks.market_tick", ignore_result=True)
def market_tick() -> int:
    """Record this minute's price of every public pool (idempotent per minute)."""
    return len(ticker.market_tick())


@shared_task(name="spot.tasks.bill_today", ignore_result=True)
def bill_today() -> int:
    """Bring today's bills up to now: the jobs' "cost so far"."""
    return len(bills.bill_jobs(now=timezone.now()))


@shared_task(name="spot.tasks.close_yesterday", ignore_result=True)
def close_yesterday() -> int:
    """Bill yesterday in full once it is over (beat runs it after midnight UTC)."""
    now = timezone.now()
    return len(bills.bill_jobs((now - timedelta(days=1)).date(), now=now))
