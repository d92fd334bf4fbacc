"""Billing: what a job's pods cost, as daily bills per (job, instance type, day, pay type).

Rules (docs/design.md rule 8 and the PAI spot page):

- Prices are per node-minute (the unit of ResourceSpec.on_demand_price_per_minute and
  PriceHistory.price): one charged minute costs its price, no conversion anywhere. Pages show a
  per-hour figure by multiplying by 60.
- Per-minute billing, no proration: every clock minute [hh:mm:00, hh:mm+1:00) in which a pod was
  running for any part is charged in full. A pod running 10:00:30-10:02:10 pays 3 minutes. A pod
  is charged a minute once even if its intervals overlap or touch inside it.
- A spot minute is charged at the market price of that minute; the series holds each price from
  its minute until the next recorded one. A pay-as-you-go minute costs the on-demand price.
- Every pod is charged separately (a 4-pod job pays 4 pod-minutes per minute).
- A minute belongs to the day (in the datetimes' own timezone, UTC in the platform) it starts in.
- Sums are exact; each bill's amounts are rounded once, half-up, to 6 places. Savings are the
  on-demand equivalent minus the amount (0 for pay-as-you-go).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Iterable, Mapping, Sequence

from market.engine import PRICE_PLACES

SPOT = "spot"
POSTPAID = "postpaid"
PAY_TYPE_TAG = "acs:pai:dlc:payType"
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class PodUsage:
    job_id: str
    pod_id: str
    instance_type: str
    pay_type: str  # SPOT or POSTPAID
    intervals: Sequence[tuple[datetime, datetime]]  # running [start, end)


@dataclass(frozen=True)
class DailyBill:
    job_id: str
    instance_type: str
    day: date
    pay_type: str
    minutes: int
    amount: Decimal
    on_demand_amount: Decimal
    savings: Decimal

    @property
    def tags(self) -> dict[str, str]:
        return {PAY_TYPE_TAG: self.pay_type}


@dataclass(frozen=True)
class PriceSeries:
    """Per-minute prices by minute, each held until the next entry."""

    prices: Mapping[datetime, Decimal]
    _minutes: tuple[datetime, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_minutes", tuple(sorted(self.prices)))

    def at(self, minute: datetime) -> Decimal:
        index = bisect.bisect_right(self._minutes, minute) - 1
        if index < 0:
            raise LookupError(f"no market price recorded at or before {minute.isoformat()}")
        return self.prices[self._minutes[index]]


def floor_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def charged_minutes(intervals: Iterable[tuple[datetime, datetime]]) -> list[datetime]:
    """Start of every minute touched by a running interval, each once, in order."""
    minutes: set[datetime] = set()
    for start, end in intervals:
        minute = floor_minute(start)
        while minute < end:
            minutes.add(minute)
            minute += MINUTE
    return sorted(minutes)


@dataclass
class _Tally:
    minutes: int = 0
    amount: Decimal = Decimal(0)
    on_demand_amount: Decimal = Decimal(0)


def _rounded(total: Decimal) -> Decimal:
    # Sum exactly, round once: no rounding drift across a day of minutes.
    return total.quantize(PRICE_PLACES, rounding=ROUND_HALF_UP)


def _tally(usages, on_demand_prices, spot_prices) -> dict[tuple, _Tally]:
    tallies: dict[tuple, _Tally] = defaultdict(_Tally)
    for usage in usages:
        on_demand = on_demand_prices[usage.instance_type]
        for minute in charged_minutes(usage.intervals):
            price = spot_prices[usage.instance_type].at(minute) if usage.pay_type == SPOT else on_demand
            tally = tallies[(usage.job_id, usage.instance_type, minute.date(), usage.pay_type)]
            tally.minutes += 1
            tally.amount += price
            tally.on_demand_amount += on_demand
    return tallies


def daily_bills(
    usages: Iterable[PodUsage],
    on_demand_prices: Mapping[str, Decimal],
    spot_prices: Mapping[str, PriceSeries],
) -> list[DailyBill]:
    """Bills for the usages, ordered by job, instance type, day and pay type."""
    usages = list(usages)
    for usage in usages:
        if usage.pay_type not in (SPOT, POSTPAID):
            raise ValueError(f"pay_type must be {SPOT!r} or {POSTPAID!r}, got {usage.pay_type!r}")
    bills = []
    for (job_id, instance_type, day, pay_type), t in sorted(_tally(usages, on_demand_prices, spot_prices).items()):
        amount, on_demand_amount = _rounded(t.amount), _rounded(t.on_demand_amount)
        bills.append(DailyBill(job_id, instance_type, day, pay_type, t.minutes, amount, on_demand_amount, on_demand_amount - amount))
    return bills
