from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from market.billing import (
    POSTPAID, SPOT, DailyBill, PodUsage, PriceSeries, charged_minutes, daily_bills,
)

ON_DEMAND = {"ecs.gn7": Decimal("0.10")}  # per node-minute (6.00 an hour)


def t(hh, mm, ss=0, day=1):
    return datetime(2024, 3, day, hh, mm, ss, tzinfo=timezone.utc)


# Per node-minute market prices, each held until the next entry.
SPOT_PRICES = {"ecs.gn7": PriceSeries({t(10, 0): Decimal("0.02"), t(10, 2): Decimal("0.03"), t(10, 5): Decimal("0.015")})}


def bill(*usages, spot_prices=SPOT_PRICES):
    return daily_bills(usages, ON_DEMAND, spot_prices)


def test_a_partly_used_minute_is_charged_in_full_and_only_once():
    assert charged_minutes([(t(10, 0, 30), t(10, 2, 10)), (t(10, 0, 45), t(10, 1, 10))]) == [t(10, 0), t(10, 1), t(10, 2)]


def test_an_interval_ending_on_a_minute_boundary_does_not_charge_the_next_minute():
    assert charged_minutes([(t(10, 4), t(10, 6))]) == [t(10, 4), t(10, 5)]
    assert charged_minutes([(t(10, 4), t(10, 4))]) == []


def test_a_spot_job_pays_each_running_minute_at_that_minutes_market_price():
    usage_a = PodUsage("job-1", "pod-a", "ecs.gn7", SPOT, [
        (t(10, 0, 30), t(10, 2, 10)),  # minutes 10:00 10:01 10:02 -> 0.02 + 0.02 + 0.03 = 0.07
        (t(10, 0, 45), t(10, 1, 10)),  # inside minutes already charged -> nothing more
        (t(10, 4), t(10, 6)),  # minutes 10:04 10:05 -> 0.03 + 0.015 = 0.045
    ])
    usage_b = PodUsage("job-1", "pod-b", "ecs.gn7", SPOT, [(t(10, 1, 59), t(10, 2))])  # 10:01 -> 0.02
    # 6 pod-minutes; 0.07 + 0.045 + 0.02 = 0.135
    # on-demand equivalent 6 x 0.10 = 0.60; savings 0.60 - 0.135 = 0.465
    [line] = bill(usage_a, usage_b)
    assert line == DailyBill("job-1", "ecs.gn7", date(2024, 3, 1), SPOT, 6,
                             Decimal("0.135000"), Decimal("0.600000"), Decimal("0.465000"))
    assert line.tags == {"acs:pai:dlc:payType": "spot"}


def test_pay_as_you_go_pays_on_demand_and_splits_at_midnight():
    usage = PodUsage("job-2", "pod-a", "ecs.gn7", POSTPAID, [(t(23, 59, 30), t(0, 1, day=2))])
    # minute 23:59 on day 1 and minute 00:00 on day 2, each at the on-demand 0.10
    first, second = bill(usage)
    assert (first.day, first.minutes, first.amount, first.savings) == (date(2024, 3, 1), 1, Decimal("0.100000"), Decimal("0"))
    assert (second.day, second.minutes, second.amount) == (date(2024, 3, 2), 1, Decimal("0.100000"))
    assert first.tags == {"acs:pai:dlc:payType": "postpaid"}


def test_bills_are_per_job_and_in_a_stable_order():
    usages = [
        PodUsage("job-b", "p", "ecs.gn7", SPOT, [(t(10, 0), t(10, 1))]),
        PodUsage("job-a", "p", "ecs.gn7", POSTPAID, [(t(10, 0), t(10, 1))]),
    ]
    assert [(b.job_id, b.pay_type) for b in bill(*usages)] == [("job-a", POSTPAID), ("job-b", SPOT)]


def test_a_day_of_minutes_is_rounded_once_not_per_minute():
    series = {"ecs.gn7": PriceSeries({t(0, 0): Decimal("0.0166667")})}
    usage = PodUsage("j", "p", "ecs.gn7", SPOT, [(t(0, 0), t(0, 0, day=2))])
    # 1440 x 0.0166667 = 24.0000480 exactly -> 24.000048; rounding each minute to 6 places
    # (0.016667) would give 1440 x 0.016667 = 24.000480
    [line] = bill(usage, spot_prices=series)
    assert (line.minutes, line.amount) == (1440, Decimal("24.000048"))


def test_a_spot_minute_before_any_recorded_price_is_an_error():
    usage = PodUsage("j", "p", "ecs.gn7", SPOT, [(t(9, 59), t(10, 1))])
    with pytest.raises(LookupError, match="09:59"):
        bill(usage)


def test_an_unknown_pay_type_is_rejected():
    with pytest.raises(ValueError, match="pay_type"):
        bill(PodUsage("j", "p", "ecs.gn7", "prepaid", []))
