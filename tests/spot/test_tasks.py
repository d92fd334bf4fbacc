from datetime import date
from unittest import mock

from django.conf import settings

from console.celery import app
from spot import tasks
from spot.models import PriceHistory
from tests.spot.builders import at


def test_beat_ticks_the_market_and_bills_with_expiring_entries():
    schedule = {entry["task"]: entry for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert schedule["spot.tasks.market_tick"]["schedule"] == settings.OPENDLC_MARKET_TICK_S == 60
    assert schedule["spot.tasks.market_tick"]["options"]["expires"] == 60
    assert schedule["spot.tasks.bill_today"]["options"]["expires"] == settings.OPENDLC_BILLING_INTERVAL_S
    assert "spot.tasks.close_yesterday" in schedule
    app.loader.import_default_modules()
    assert {"spot.tasks.market_tick", "spot.tasks.bill_today", "spot.tasks.close_yesterday"} <= set(app.tasks)


def test_the_tick_task_records_this_minutes_prices(demo_cluster):
    assert tasks.market_tick() == 4
    assert PriceHistory.objects.count() == 4


def test_closing_yesterday_bills_the_whole_day_before_now(demo_cluster):
    just_after_midnight = at(0, 10, day=2)
    with mock.patch("spot.tasks.timezone.now", return_value=just_after_midnight), \
            mock.patch("spot.bills.bill_jobs", return_value=[]) as bill_jobs:
        tasks.close_yesterday()
    bill_jobs.assert_called_once_with(date(2026, 12, 1), now=just_after_midnight)
