"""Beat's watchdog says loudly when the scheduler stopped cycling while jobs wait (cycle/watchdog.py)."""

import logging
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from cycle.models import SchedulerBeat
from cycle.schedule import ScheduleCycle
from cycle.watchdog import REPEAT_EVERY_S, Watchdog, WatchingScheduler, stall
from jobs.services import create_job
from tests.jobs.conftest import make_request

pytestmark = pytest.mark.django_db


def cycled(seconds_ago):
    SchedulerBeat.objects.update_or_create(pk=1, defaults={"at": timezone.now() - timedelta(seconds=seconds_ago)})


def test_no_waiting_job_is_no_stall_even_without_a_scheduler(bob):
    assert stall(timezone.now()) is None


def test_waiting_jobs_and_no_recent_cycle_are_a_stall(bob, settings):
    settings.OPENDLC_SCHEDULE_INTERVAL_S = 5
    create_job(bob, make_request())
    assert "has finished no schedule cycle never while 1 job(s) wait" in stall(timezone.now())
    cycled(30)
    assert stall(timezone.now()) is None
    cycled(61)
    assert "not since" in stall(timezone.now()) and "(61 s)" in stall(timezone.now())


def test_the_watchdog_logs_a_stall_once_again_later_and_its_end(bob, caplog):
    create_job(bob, make_request())
    clock = [0.0]
    dog = Watchdog(clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="cycle.watchdog"):
        for t in (0, 30, 60, REPEAT_EVERY_S + 1):  # a check every 30 s; one more after the repeat interval
            clock[0] = t
            dog.check()
        cycled(0)
        clock[0] += 30
        dog.check()
    said = [(r.levelname, r.getMessage()[:40]) for r in caplog.records]
    assert said == [("ERROR", "watchdog: the scheduler has finished no "), ("ERROR", "watchdog: the scheduler has finished no "),
                    ("WARNING", "watchdog: the scheduler is cycling again")]


def test_a_paced_cycle_records_that_it_ran(bob):
    ScheduleCycle().run_paced()
    assert timezone.now() - SchedulerBeat.objects.get().at < timedelta(seconds=5)


def test_beat_runs_the_watching_scheduler():
    assert import_string(settings.CELERY_BEAT_SCHEDULER.replace(":", ".")) is WatchingScheduler
