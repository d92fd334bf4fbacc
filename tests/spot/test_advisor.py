"""market.advisor.bid_outlook against small hand-made price histories, each figure worked out by
hand in the comments. The release rule is the scheduler's own (scheduler.spot.release_price)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from market.advisor import bid_outlook
from scheduler import LINGJUN
from scheduler.model import ECS, MarketState
from scheduler.spot import release_price

ON_DEMAND = Decimal("1.00")  # per node-minute


def t(hh, mm, ss=0, day=1):
    return datetime(2024, 3, day, hh, mm, ss, tzinfo=UTC)


def rule(resource_type):
    return lambda price, average: release_price(MarketState("it", price, average, resource_type))


# Minute by minute 10:00..10:09: .30 .30 .30 .50 .50 .20 .20 .20 .60 .60
TEN_MINUTES = {t(10, 0): Decimal("0.30"), t(10, 3): Decimal("0.50"), t(10, 5): Decimal("0.20"), t(10, 8): Decimal("0.60")}
NOW = t(10, 9, 30)  # 10:09 is the window's last minute


def outlook(bid, resource_type=ECS, prices=TEN_MINUTES, now=NOW, days=1, **kw):
    return bid_outlook(prices, bid=Decimal(bid), on_demand_price=ON_DEMAND, release_price=rule(resource_type),
                       now=now, days=days, **kw)


def test_an_ecs_bid_holds_while_the_price_is_at_or_below_it_and_is_released_when_it_rises_above():
    # 0.40: runs 10:00-10:02 (.30), released at 10:03 (.50), admitted again at 10:05 (.20),
    # released at 10:08 (.60): 6 of 10 minutes, 2 releases in 10 minutes = 288 a day,
    # paying (3 x .30 + 3 x .20) / 6 = .25, saving 1.00 - .25 = .75 (75 %).
    o = outlook("0.40")
    assert (o.minutes, o.held_minutes, o.releases) == (10, 6, 2)
    assert o.held_share == Decimal("0.6")
    assert o.releases_per_day == Decimal(288)
    assert o.expected_price == Decimal("0.25")
    assert (o.saving, o.saving_share) == (Decimal("0.75"), Decimal("0.75"))


def test_a_lingjun_bid_is_released_by_the_last_hours_average_not_the_instant_price():
    # Averages since 10:00: .30 .30 .30 .35 .38 .35 .328571 .3125 .344444 .37. A bid of 0.35 rides
    # out the .50 at 10:03 (average .35), is released at 10:04 (.38), admitted at 10:05 (.20),
    # rides out the .60 at 10:08 (average .344444) and is released at 10:09 (.37): 8 minutes held,
    # paying (3 x .30 + .50 + 3 x .20 + .60) / 8 = .325. On ECS the same bid holds 6 minutes.
    o = outlook("0.35", LINGJUN)
    assert (o.minutes, o.held_minutes, o.releases) == (10, 8, 2)
    assert o.expected_price == Decimal("0.325")
    assert (o.saving, o.saving_share) == (Decimal("0.675"), Decimal("0.675"))
    assert outlook("0.35", ECS).held_minutes == 6


def test_a_lingjun_bid_above_every_hourly_average_is_never_released():
    # The highest average is .38: a 0.40 bid holds all 10 minutes and pays their mean, 3.7 / 10.
    o = outlook("0.40", LINGJUN)
    assert (o.held_minutes, o.releases, o.held_share, o.releases_per_day) == (10, 0, Decimal(1), Decimal(0))
    assert o.expected_price == Decimal("0.37")


def test_the_protection_period_keeps_an_outbid_job_running_until_it_ends():
    # 0.40 with 4 minutes of protection: admitted 10:00, protected before 10:04, so the .50 of 10:03
    # is paid and the release comes at 10:04; admitted again 10:05, protected before 10:09, released
    # at 10:09. Held 10:00-10:03 and 10:05-10:08: 8 minutes paying (.9 + .5 + .6 + .6) / 8 = .325.
    o = outlook("0.40", protection=timedelta(minutes=4))
    assert (o.held_minutes, o.releases, o.expected_price) == (8, 2, Decimal("0.325"))


def test_a_bid_below_every_price_never_runs():
    o = outlook("0.10")
    assert (o.minutes, o.held_minutes, o.releases, o.held_share) == (10, 0, 0, Decimal(0))
    assert o.expected_price is None and o.saving is None and o.saving_share is None


def test_a_window_longer_than_the_history_counts_only_the_recorded_minutes():
    o = outlook("0.40", days=30)
    assert (o.days, o.minutes, o.held_minutes, o.releases_per_day) == (30, 10, 6, Decimal(288))


def test_no_history_gives_no_figures():
    o = outlook("0.40", prices={})
    assert (o.minutes, o.held_share, o.releases_per_day, o.expected_price) == (0, None, None, None)


# .90 from day 1 09:40, .20 from 10:10, which is where the one-day window ending day 2 10:09 starts.
BEFORE_THE_WINDOW = {t(9, 40): Decimal("0.90"), t(10, 10): Decimal("0.20")}
DAY_LATER = t(10, 9, 30, day=2)


def test_the_window_leaves_out_the_minutes_before_it():
    # ECS, 0.50: the 30 minutes at .90 are before the window; its 1,440 minutes all hold at .20.
    o = outlook("0.50", prices=BEFORE_THE_WINDOW, now=DAY_LATER)
    assert (o.minutes, o.held_minutes, o.releases, o.expected_price) == (1440, 1440, 0, Decimal("0.2"))
    # Two days reach back to 09:40: 30 more minutes, at .90, never held.
    two = outlook("0.50", prices=BEFORE_THE_WINDOW, now=DAY_LATER, days=2)
    assert (two.minutes, two.held_minutes, two.releases) == (1470, 1440, 0)
    assert two.held_share == Decimal("0.979592")  # 1440 / 1470


def test_the_lingjun_average_reaches_back_an_hour_before_the_window():
    # At 10:10 + j the hour holds 30 - max(0, j - 29) minutes at .90 and j + 1 at .20; the average
    # is above 0.50 up to j = 33 ((26 x .9 + 34 x .2) / 60 = .503333) and below from j = 34
    # ((25 x .9 + 35 x .2) / 60 = .491667). Unprotected, the bid is admitted at each even j (price
    # .20) and released at each odd j up to 33: 17 releases, held 17 minutes, then from j = 34 the
    # remaining 1,406 minutes: 1,423 held.
    o = outlook("0.50", LINGJUN, prices=BEFORE_THE_WINDOW, now=DAY_LATER)
    assert (o.minutes, o.held_minutes, o.releases, o.expected_price) == (1440, 1423, 17, Decimal("0.2"))
    # With the hour's protection the job outlasts the high average: it holds the whole day.
    protected = outlook("0.50", LINGJUN, prices=BEFORE_THE_WINDOW, now=DAY_LATER, protection=timedelta(hours=1))
    assert (protected.held_minutes, protected.releases) == (1440, 0)
