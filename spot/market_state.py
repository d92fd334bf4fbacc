"""The spot market as the rest of the platform reads it: prices now and over the last hour.

Two readers, one source (PriceHistory plus a live look at the pools):

- ``current_markets(now)`` for the scheduler snapshot (cycle.schedule): per instance type with
  a public pool and a recorded price, ``Market(price, avg_last_hour, stock_status)``.
- ``spot_offers(now)`` for ListEcsSpecs and the console: per instance type, on-demand price,
  market price, discount (price / on-demand, the API's ``NonProtectSpotDiscount``), stock.
- ``bid_outlooks(spec, bid, now)`` for the console's bid advisor: how a bid would have fared over
  the last 1, 7 and 30 days (market.advisor), under the scheduler's release rule.

All prices are Decimal per node-minute; pages show per hour by multiplying by 60.

The average over the last hour is minute-weighted: each of the 60 minutes ending with ``now``'s
minute counts the price held in it (the last row at or before it), so sparse rows (hand-written
history, a backfill every 5 minutes, a missed beat) weigh by how long they held. Minutes before
the type's first recorded price are left out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from django.utils import timezone

from market.advisor import BidOutlook, bid_outlook
from market.bids import DEFAULT_SPOT_DURATION_HOURS, market_range
from market.billing import PriceSeries
from market.engine import average_price, spot_discount, tick_of, time_of
from quotas.models import ResourceSpec
from scheduler import MarketState
from scheduler.spot import WITHOUT_STOCK, release_price
from spot.models import PriceHistory
from spot.pool import public_pools

HOUR_MINUTES = 60
ADVICE_DAYS = (1, 7, 30)
LOOKBACK = timedelta(hours=2)  # rows fetched before the hour in one query; older anchors cost one more


class Market(NamedTuple):
    """One instance type's spot market at a moment (unpacks as ``price, avg, stock = market``)."""

    price: Decimal  # per node-minute: the latest recorded price at or before now
    avg_last_hour: Decimal  # per node-minute: minute-weighted mean over the last 60 minutes
    stock_status: str  # SpotStockStatus for one node: WithStock / ClosedWithStock / WithoutStock


def current_markets(now: datetime | None = None) -> dict[str, Market]:
    """Market per instance type that has a public pool and a price recorded at or before now.

    A type with a pool but no price yet is absent (the scheduler treats it as no market).
    """
    now = now or timezone.now()
    pools = public_pools()
    if not pools:
        return {}
    series = price_series({p.spec for p in pools.values()}, now)
    minutes = last_hour_minutes(now)
    markets = {}
    for instance_type, pool in sorted(pools.items()):
        prices = series.get(pool.spec.pk)
        if prices is None:
            continue
        price = prices.at(now)
        held = [prices.at(m) for m in minutes if m >= prices.first] or [price]
        markets[instance_type] = Market(price, average_price(held), pool.stock_status())
    return markets


def last_hour_minutes(now: datetime) -> list[datetime]:
    """The 60 minute starts ending with now's minute, oldest first."""
    end = time_of(tick_of(now))
    return [end - timedelta(minutes=n) for n in range(HOUR_MINUTES - 1, -1, -1)]


class _Series(PriceSeries):
    @property
    def first(self) -> datetime:
        return self._minutes[0]


def price_series(specs, now: datetime) -> dict[int, _Series]:
    """Per spec pk: the held-price series covering the last hour (rows from its anchor on)."""
    window_start = last_hour_minutes(now)[0]
    rows: dict[int, dict[datetime, Decimal]] = defaultdict(dict)
    fetched = PriceHistory.objects.filter(spec__in=specs, at__gt=window_start - LOOKBACK, at__lte=now)
    for spec_id, at, price in fetched.values_list("spec_id", "at", "price"):
        rows[spec_id][at] = price
    for spec in specs:
        if not any(at <= window_start for at in rows.get(spec.pk, {})):
            _add_anchor(rows, spec, window_start)
    return {pk: _Series(prices) for pk, prices in rows.items() if prices}


def _add_anchor(rows, spec, window_start: datetime) -> None:
    anchor = PriceHistory.objects.filter(spec=spec, at__lte=window_start).order_by("-at").first()
    if anchor is not None:
        rows[spec.pk][anchor.at] = anchor.price


@dataclass(frozen=True)
class SpotOffer:
    """One row of ListEcsSpecs / the console's spec picker. Prices per node-minute."""

    instance_type: str
    resource_type: str
    on_demand_price: Decimal
    price: Decimal | None  # None: no public pool or no price recorded yet
    avg_last_hour: Decimal | None
    spot_discount: Decimal | None  # price / on-demand (NonProtectSpotDiscount), 6 places
    stock_status: str
    market_range: tuple[Decimal, Decimal]  # what a SpotPriceLimit may name

    @property
    def on_demand_price_per_hour(self) -> Decimal:
        return self.on_demand_price * 60

    @property
    def price_per_hour(self) -> Decimal | None:
        return None if self.price is None else self.price * 60


def spot_offers(now: datetime | None = None) -> list[SpotOffer]:
    """Every instance type, ordered by name, with its market (or None fields without one)."""
    markets = current_markets(now)
    offers = []
    for spec in ResourceSpec.objects.order_by("instance_type"):
        market = markets.get(spec.instance_type)
        on_demand = spec.on_demand_price_per_minute
        offers.append(SpotOffer(
            spec.instance_type, spec.resource_type, on_demand,
            market.price if market else None,
            market.avg_last_hour if market else None,
            spot_discount(market.price, on_demand) if market else None,
            market.stock_status if market else WITHOUT_STOCK,
            market_range(on_demand),
        ))
    return offers


@dataclass(frozen=True)
class PricePoint:
    """One point of the History Price chart / GetSpotPriceHistory's SpotPriceItem."""

    at: datetime
    price: Decimal  # per node-minute
    spot_discount: Decimal | None  # price / on-demand (SpotPriceItem.SpotDiscount)


def price_history(instance_type: str, start: datetime, end: datetime) -> list[PricePoint]:
    """Recorded prices of an instance type in [start, end], oldest first."""
    spec = ResourceSpec.objects.get(instance_type=instance_type)
    rows = PriceHistory.objects.filter(spec=spec, at__gte=start, at__lte=end).order_by("at")
    on_demand = spec.on_demand_price_per_minute
    return [PricePoint(at, price, spot_discount(price, on_demand)) for at, price in rows.values_list("at", "price")]


def bid_outlooks(spec: ResourceSpec, bid: Decimal, now: datetime | None = None) -> list[BidOutlook]:
    """How ``bid`` (per node-minute) on the spec's spot market would have fared over each of the
    last ADVICE_DAYS days: the scheduler's release rule for its resource type, and the protection
    period a job gets when it names none (the form names none)."""
    now = now or timezone.now()
    since = now - timedelta(days=max(ADVICE_DAYS), hours=1)  # an hour more: Lingjun's average
    rows = PriceHistory.objects.filter(spec=spec)
    prices = dict(rows.filter(at__gt=since, at__lte=now).values_list("at", "price"))
    anchor = rows.filter(at__lte=since).order_by("-at").values_list("at", "price").first()
    if anchor is not None:
        prices[anchor[0]] = anchor[1]

    def release(price: Decimal, average: Decimal) -> Decimal:
        return release_price(MarketState(spec.instance_type, price, average, spec.resource_type))

    return [bid_outlook(prices, bid=bid, on_demand_price=spec.on_demand_price_per_minute, release_price=release,
                        now=now, days=days, protection=timedelta(hours=DEFAULT_SPOT_DURATION_HOURS))
            for days in ADVICE_DAYS]
