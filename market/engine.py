"""The spot market's price engine: a pure function from pool demand to a price ratio.

One tick (one minute by default) of one pool (the public pool of an instance type) is

    state' = step(state, observation, tick, pool=..., params=...)

where ``state`` holds the smoothed utilization and the current price ratio (spot price / on-demand
price). Nothing here reads a clock, a database or a global random generator, so the same inputs
give the same price series: a price history can be recomputed and a test can replay a day.

Why a sigmoid target and not an EIP-1559 controller: the controller ``r' = r(1 + a(u - u*)/u*)``
integrates the error, so its price depends on the whole path of demand — it drifts to a bound
whenever utilization sits a little off target, and "more demand never lowers the price" only holds
for one step. A target curve ``r*(u)`` of smoothed utilization is a function of the present state:
monotone in demand by construction, readable by an operator ("at 90 % busy spot costs ~57 % of
on-demand"), and the rate limit alone supplies the gradual movement providers describe ("prices
adjust more gradually, based on longer-term trends in supply and demand", AWS 2017).

The pipeline of one tick, each step monotone in demand so their composition is too:
  1. utilization u = (pay-as-you-go + spot in use + spot queued) / capacity
  2. exponential moving average of u (time constant ``smoothing_hours``)
  3. target ratio r*(u): a logistic curve around ``knee``, rescaled so r*(0) = floor and
     r*(saturation) = ceiling
  4. bounded noise seeded from (pool, tick), added to the target (independent of demand)
  5. the move from the current ratio limited to ``max_move_per_hour`` spread evenly over the ticks
  6. clamp to [floor, ceiling] = [0.1, 1.0] of on-demand

Two choices keep the market clearing (measured with bench/spot_market.py: docs/performance.md):

- ``spot_queued`` counts only bids that would pay the current price (``queued_demand``). Bids
  below it cannot take capacity at this price; counting every waiting bid let a pile of low
  bids hold the price at or near 1.0, above every discount bid (at most 0.9), so the queue
  never drained.
- The ceiling is reached only with excess demand (``saturation`` = 1.2 > 1, knee 0.9): a pool
  that is exactly full sits near 80 % of on-demand instead of at 100 %, where it would price out
  its own discount bids and release more of them.

Floats are used only in steps 1-4; the ratio itself is a Decimal with RATIO_PLACES places, so the
rate limit and the bounds are exact.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Iterable, Sequence

RATIO_PLACES = Decimal("0.000001")
PRICE_PLACES = Decimal("0.000001")
FLOOR = Decimal("0.1")
CEILING = Decimal("1.0")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class MarketParams:
    """Tuning of the price engine; the defaults move a full swing (0.1 -> 1.0) in six hours."""

    tick_minutes: int = 1
    smoothing_hours: float = 2.0  # EMA time constant: demand spikes shorter than this barely count
    knee: float = 0.9  # utilization where the target is halfway up the curve
    saturation: float = 1.2  # utilization (with excess demand) where the target is on-demand
    steepness: float = 10.0
    max_move_per_hour: Decimal = Decimal("0.15")  # in ratio points (of on-demand) per hour
    noise: float = 0.002  # half-width of the per-tick noise, in ratio points

    def __post_init__(self):
        if self.tick_minutes <= 0 or 60 % self.tick_minutes:
            raise ValueError("tick_minutes must divide an hour (1, 2, 5, 10, 15, 30 or 60)")

    @property
    def ticks_per_hour(self) -> int:
        return 60 // self.tick_minutes

    @property
    def max_step(self) -> Decimal:
        # Rounded down so that 60 ticks in a row never exceed the hourly limit.
        step = self.max_move_per_hour / self.ticks_per_hour
        return step.quantize(RATIO_PLACES, rounding=ROUND_DOWN)


DEFAULT_PARAMS = MarketParams()


@dataclass(frozen=True)
class PoolObservation:
    """What the pool looks like at a tick, in one unit (nodes or GPUs, the caller chooses)."""

    capacity: int
    payg_in_use: int = 0
    spot_in_use: int = 0
    spot_queued: int = 0  # demand of Bidding jobs whose bid pays the current price (queued_demand)


@dataclass(frozen=True)
class MarketState:
    smoothed_u: float
    ratio: Decimal


def utilization(obs: PoolObservation) -> float:
    """Demand over capacity; above 1 when queued bids exceed what is free. An empty pool is full."""
    demand = obs.payg_in_use + obs.spot_in_use + obs.spot_queued
    if obs.capacity <= 0:
        return 1.0
    return demand / obs.capacity


def queued_demand(bids: Iterable[tuple[Decimal, int]], price: Decimal) -> int:
    """Units asked by waiting bids (bid price, units) that pay at least ``price``: the queue that
    counts toward utilization. Lower bids cannot take capacity at this price, so they do not
    push it up."""
    return sum(units for bid, units in bids if bid >= price)


def smooth(previous: float, u: float, params: MarketParams = DEFAULT_PARAMS) -> float:
    """One EMA step; the weight makes the time constant independent of the tick length."""
    weight = 1.0 - math.exp(-params.tick_minutes / (params.smoothing_hours * 60.0))
    return previous + weight * (u - previous)


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def target_ratio(u: float, params: MarketParams = DEFAULT_PARAMS) -> float:
    """r*(u): rises smoothly from FLOOR at u=0 to CEILING at u >= saturation."""
    u = min(max(u, 0.0), params.saturation)
    k, knee = params.steepness, params.knee
    low, high = _logistic(-k * knee), _logistic(k * (params.saturation - knee))
    share = (_logistic(k * (u - knee)) - low) / (high - low)
    return float(FLOOR) + (float(CEILING) - float(FLOOR)) * share


def noise(pool: str, tick: int, amplitude: float) -> float:
    """A value in [-amplitude, amplitude] drawn from sha256(pool, tick): pure and replayable."""
    digest = hashlib.sha256(f"{pool}\x00{tick}".encode()).digest()
    unit = int.from_bytes(digest[:8], "big") / 2**64  # in [0, 1)
    return amplitude * (2.0 * unit - 1.0)


def clamp_ratio(ratio: Decimal) -> Decimal:
    return min(max(ratio, FLOOR), CEILING)


def limit_move(current: Decimal, target: Decimal, max_step: Decimal) -> Decimal:
    """Move from current toward target by at most max_step."""
    return current + min(max(target - current, -max_step), max_step)


def step(
    state: MarketState,
    obs: PoolObservation,
    tick: int,
    *,
    pool: str,
    params: MarketParams = DEFAULT_PARAMS,
) -> MarketState:
    """Advance one pool by one tick (see the module docstring for the six steps)."""
    smoothed = smooth(state.smoothed_u, utilization(obs), params)
    wanted = target_ratio(smoothed, params) + noise(pool, tick, params.noise)
    wanted_ratio = Decimal(repr(wanted)).quantize(RATIO_PLACES, rounding=ROUND_HALF_UP)
    moved = limit_move(state.ratio, wanted_ratio, params.max_step)
    return MarketState(smoothed_u=smoothed, ratio=clamp_ratio(moved))


def initial_state(obs: PoolObservation | None = None, params: MarketParams = DEFAULT_PARAMS) -> MarketState:
    """A pool's first state: the target of its current utilization (of an empty pool: the floor)."""
    u = utilization(obs) if obs is not None else 0.0
    ratio = Decimal(repr(target_ratio(u, params))).quantize(RATIO_PLACES, rounding=ROUND_HALF_UP)
    return MarketState(smoothed_u=u, ratio=clamp_ratio(ratio))


def price_of(ratio: Decimal, on_demand_price: Decimal) -> Decimal:
    """ratio x on-demand as money (PRICE_PLACES, half up). The market price and a discount bid
    (market.bids.bid_price) both round here, so a bid at discount d meets a market at ratio d."""
    return (ratio * on_demand_price).quantize(PRICE_PLACES, rounding=ROUND_HALF_UP)


def market_price(ratio: Decimal, on_demand_price: Decimal) -> Decimal:
    """The spot price for a ratio, in the unit of on_demand_price (per node-minute in the platform)."""
    return price_of(clamp_ratio(ratio), on_demand_price)


def spot_discount(price: Decimal, on_demand_price: Decimal) -> Decimal | None:
    """price / on-demand (the API's SpotDiscount and NonProtectSpotDiscount), RATIO_PLACES half up;
    None for an instance type without an on-demand price."""
    if not on_demand_price:
        return None
    return (price / on_demand_price).quantize(RATIO_PLACES, rounding=ROUND_HALF_UP)


def average_price(prices: Sequence[Decimal]) -> Decimal:
    """Mean of a window of market prices; Lingjun releases a bid below this average."""
    if not prices:
        raise ValueError("average_price needs at least one price")
    return mean_price(sum(prices, Decimal(0)), len(prices))


def mean_price(total: Decimal, count: int) -> Decimal:
    """``total / count`` rounded as a price: average_price's rounding, for callers that keep a
    running sum over a sliding window (market.advisor) instead of re-adding the window."""
    return (total / count).quantize(PRICE_PLACES, rounding=ROUND_HALF_UP)


def tick_of(at: datetime, params: MarketParams = DEFAULT_PARAMS) -> int:
    """The tick index containing an aware datetime: whole ticks since the Unix epoch (UTC)."""
    seconds = (at - EPOCH) // timedelta(seconds=1)
    return seconds // (60 * params.tick_minutes)


def time_of(tick: int, params: MarketParams = DEFAULT_PARAMS) -> datetime:
    """The start of a tick, in UTC."""
    return EPOCH + timedelta(minutes=tick * params.tick_minutes)
