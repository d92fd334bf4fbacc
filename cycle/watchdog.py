"""The scheduler's watchdog: beat notices a scheduler that stopped cycling while jobs wait, and
says so loudly (an ERROR line in beat's log, and `opendlc_scheduler_last_cycle_age_seconds`).

The scheduler worker cannot watch itself: a dead or wedged worker runs no task. So beat, a separate
process that only sends messages, reads when a cycle last finished (`SchedulerBeat`, written by the
cycle at most every BEAT_EVERY_S) from the database on its own tick.
"""

import logging
import time
from datetime import datetime, timedelta

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from cycle.models import SchedulerBeat
from jobs.models import Job
from jobs.states import WAITING

log = logging.getLogger(__name__)

BEAT_EVERY_S = 5.0  # how often a busy scheduler records that it cycled: one row update, not one per cycle
CHECK_EVERY_S = 30.0
REPEAT_EVERY_S = 300.0  # while a stall lasts, say it again this often


class Beat:
    """The cycle's side: record a finished cycle, at most every BEAT_EVERY_S."""

    def __init__(self):
        self._recorded = float("-inf")

    def cycled(self) -> None:
        if time.monotonic() - self._recorded < BEAT_EVERY_S:
            return
        SchedulerBeat.objects.update_or_create(pk=1, defaults={"at": timezone.now()})
        self._recorded = time.monotonic()


def stall_limit() -> timedelta:
    """How long without a cycle is a stall: several beat intervals, never under a minute."""
    return timedelta(seconds=max(60, 6 * settings.OPENDLC_SCHEDULE_INTERVAL_S))


def last_cycle_at() -> datetime | None:
    return SchedulerBeat.objects.filter(pk=1).values_list("at", flat=True).first()


def stall(now: datetime) -> str | None:
    """What is wrong, in a sentence, when jobs wait and no cycle finished within stall_limit()."""
    last = last_cycle_at()
    if last is not None and now - last <= stall_limit():
        return None
    waiting = Job.objects.filter(status__in=WAITING).count()
    if not waiting:
        return None
    since = "never" if last is None else f"not since {last:%Y-%m-%d %H:%M:%S} UTC ({(now - last).total_seconds():.0f} s)"
    return (f"the scheduler has finished no schedule cycle {since} while {waiting} job(s) wait: is the worker "
            f"of queue 'scheduler' running? (celery -A console worker --queues default,scheduler)")


class Watchdog:
    """Beat's side: check every CHECK_EVERY_S; log a stall once, again every REPEAT_EVERY_S, and its end."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.next_check = 0.0
        self.said_at = None

    def check(self, now: datetime | None = None) -> str | None:
        if self.clock() < self.next_check:
            return None
        self.next_check = self.clock() + CHECK_EVERY_S
        problem = stall(now or timezone.now())
        if problem is None:
            if self.said_at is not None:
                log.warning("watchdog: the scheduler is cycling again")
            self.said_at = None
            return None
        if self.said_at is None or self.clock() - self.said_at >= REPEAT_EVERY_S:
            log.error("watchdog: %s", problem)
            self.said_at = self.clock()
        return problem


class WatchingScheduler(PersistentScheduler):
    """Celery beat's scheduler, with the watchdog on its tick (CELERY_BEAT_SCHEDULER)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.watchdog = Watchdog()

    def tick(self, *args, **kwargs):
        wait = super().tick(*args, **kwargs)
        try:
            close_old_connections()
            self.watchdog.check()
        except Exception:  # the database may be the thing that is down: keep sending the schedule
            log.exception("watchdog: could not check the scheduler")
        return min(wait, CHECK_EVERY_S)
