"""The bid advisor: how a spot bid would have fared against a recorded price history.

``bid_outlook`` replays the spot rules (docs/design.md rule 7) over the last ``days`` days, one
minute at a time:

- a waiting bid is admitted in a minute whose market price is at or below it;
- a running bid is released in a minute whose release price is above it, unless it is still inside
  its protection period (counted from its admission); it may be admitted again from the next minute.
  Which price releases is the caller's ``release_price(price, average_last_hour)``: the scheduler's
  rule (scheduler.spot.release_price: ECS the price, Lingjun the last hour's average), passed in
  because market/ and scheduler/ may not import each other and the rule must keep one home.

A price holds from its minute until the next recorded one (market.billing.PriceSeries, as billing
reads it), and a running minute pays that price. The last hour's average is minute-weighted over the
60 minutes ending with each minute, minutes before the first recorded price left out, as
spot.market_state computes it for the scheduler. Stock and pay-as-you-go demand are left out: the
outlook says what the price alone would have done to the bid. A window longer than the recorded
history covers only the recorded minutes (``minutes``), and every share is of those.

Pure: no clock, no database; ``now`` is given. Prices are per node-minute, Decimal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from market.billing import MINUTE, PriceSeries, floor_minute
from market.engine import RATIO_PLACES, mean_price

DAY_MINUTES = 24 * 60
HOUR_MINUTES = 60

ReleasePrice = Callable[[Decimal, Decimal], Decimal]  # (price, average of the last hour) -> release price


@dataclass(frozen=True)
class BidOutlook:
    """What one bid would have met over one window."""

    days: int
    minutes: int  # minutes of the window with a recorded price
    held_minutes: int  # of those, the minutes the bid would have run
    releases: int  # times it would have been released (outbid)
    paid: Decimal  # the market prices of the held minutes, summed (per node, one minute each)
    on_demand_price: Decimal

    @property
    def recorded_days(self) -> Decimal | None:
        return _ratio(Decimal(self.minutes), DAY_MINUTES)

    @property
    def held_share(self) -> Decimal | None:
        return _ratio(Decimal(self.held_minutes), self.minutes)

    @property
    def releases_per_day(self) -> Decimal | None:
        return _ratio(Decimal(self.releases * DAY_MINUTES), self.minutes)

    @property
    def expected_price(self) -> Decimal | None:
        """The average market price over the minutes it held: what a running minute cost."""
        return mean_price(self.paid, self.held_minutes) if self.held_minutes else None

    @property
    def saving(self) -> Decimal | None:
        """Per node-minute, against pay-as-you-go at the on-demand price."""
        expected = self.expected_price
        return None if expected is None else self.on_demand_price - expected

    @property
    def saving_share(self) -> Decimal | None:
        saving = self.saving
        return None if saving is None or not self.on_demand_price else _ratio(saving, self.on_demand_price)


def _ratio(part: Decimal, whole) -> Decimal | None:
    return (part / whole).quantize(RATIO_PLACES, rounding=ROUND_HALF_UP) if whole else None


def bid_outlook(
    prices: Mapping[datetime, Decimal],
    *,
    bid: Decimal,
    on_demand_price: Decimal,
    release_price: ReleasePrice,
    now: datetime,
    days: int,
    protection: timedelta = timedelta(0),
) -> BidOutlook:
    """How ``bid`` would have fared over the ``days`` days ending with ``now``'s minute.

    ``prices`` are the recorded market prices by time; to judge the window's first minutes they
    should reach back an hour before it (for the average) and hold the row in force at its start.
    """
    running, protected_until = False, None
    covered = held = releases = 0
    paid = Decimal(0)
    for minute, price, average in _minutes(prices, now, days):
        covered += 1
        if running and bid < release_price(price, average) and minute >= protected_until:
            running, releases = False, releases + 1
            continue  # a released job bids again from the next minute
        if not running and bid >= price:
            running, protected_until = True, minute + protection
        if running:
            held, paid = held + 1, paid + price
    return BidOutlook(days, covered, held, releases, paid, on_demand_price)


def _window(prices: Mapping[datetime, Decimal], now: datetime, days: int) -> tuple[datetime, datetime, datetime] | None:
    """(first minute with a price, first minute of the window, last minute), or None without a price."""
    recorded = [at for at in prices if at <= now]
    if not recorded:
        return None
    first_row = min(recorded)
    first = floor_minute(first_row) + (MINUTE if first_row != floor_minute(first_row) else timedelta(0))
    end = floor_minute(now)
    return first, end - timedelta(days=days) + MINUTE, end


def _minutes(prices, now, days) -> Iterator[tuple[datetime, Decimal, Decimal]]:
    """(minute, price, average of the last hour) for each recorded minute of the window."""
    window = _window(prices, now, days)
    if window is None:
        return
    first, start, end = window
    series = PriceSeries({at: p for at, p in prices.items() if at <= now})
    hour: deque[Decimal] = deque()
    total = Decimal(0)
    minute = max(first, start - (HOUR_MINUTES - 1) * MINUTE)  # warm the average up before the window
    while minute <= end:
        price = series.at(minute)
        hour.append(price)
        total += price
        if len(hour) > HOUR_MINUTES:
            total -= hour.popleft()
        if minute >= start:
            yield minute, price, mean_price(total, len(hour))
        minute += MINUTE
