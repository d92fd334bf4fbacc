"""The market tick: move every public pool's price one tick and record it in PriceHistory.

For each instance type with a public pool, one tick is

  1. read the pool's last PriceHistory row at or before this minute: the engine state
     (ratio, smoothed utilization) and the current price;
  2. observe the pool (spot.pool): Ready capacity, pay-as-you-go and spot in use, and the
     Bidding demand whose bid pays the current price (queued_demand);
  3. advance the PriceSource once per tick since that row (a missed beat, or a tick interval
     longer than a minute, catches up at the engine's hourly rate, capped at a day);
  4. record the row for this minute with price, SpotStockStatus and utilization.

A tick is idempotent per (instance type, minute): the row is created with get_or_create on the
unique (spec, at), so two beats in one minute, or a retried task, write one row and the second
returns the first's row.

The source is the demand model (market.engine) unless OPENDLC_PRICE_REPLAY is
``path:machine_type:region[:speed]``: then every pool replays that GCP price history as a ratio
of its own on-demand price, history time aligned with the calendar (speed 1, the last price holds
after the history ends) or sped up ``speed`` history minutes per minute and looped.
"""

from __future__ import annotations

import functools
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.utils import timezone

from market.engine import (
    DEFAULT_PARAMS, FLOOR, RATIO_PLACES, MarketState, clamp_ratio, initial_state, market_price,
    tick_of, time_of, utilization,
)
from market.pricesource import ModelPriceSource, PriceSource, ReplayPriceSource, load_gcp_history
from spot.models import PriceHistory
from spot.pool import PoolUsage, public_pools

MAX_CATCH_UP_TICKS = 1440


def market_tick(now: datetime | None = None) -> list[PriceHistory]:
    """Tick every public pool at ``now``'s minute; returns the row of each (new or existing)."""
    now = now or timezone.now()
    at = time_of(tick_of(now))
    return [tick_pool(pool, at) for _, pool in sorted(public_pools().items())]


def tick_pool(pool: PoolUsage, at: datetime) -> PriceHistory:
    spec = pool.spec
    last = PriceHistory.objects.filter(spec=spec, at__lte=at).order_by("-at").first()
    if last is not None and last.at == at:
        return last  # this minute is already recorded
    on_demand = spec.on_demand_price_per_minute
    source, tick = price_source(spec.instance_type), tick_of(at)
    if last is None:  # a new pool starts from the target of its demand (bids paying on-demand)
        obs = pool.observation(on_demand)
        state = _advance(source, initial_state(obs), obs, tick - 1, tick)
    else:
        obs = pool.observation(last.price)
        state = _advance(source, state_of(last), obs, tick_of(last.at), tick)
    row, _ = PriceHistory.objects.get_or_create(
        spec=spec, at=at,
        defaults=dict(
            price=market_price(state.ratio, on_demand), ratio=state.ratio,
            smoothed_utilization=state.smoothed_u, utilization=utilization(obs),
            stock_status=pool.stock_status(),
        ),
    )
    return row


def _advance(source: PriceSource, state: MarketState, obs, last_tick: int, tick: int) -> MarketState:
    for t in range(max(last_tick + 1, tick - MAX_CATCH_UP_TICKS + 1), tick + 1):
        state = source.advance(state, obs, t)
    return state


def state_of(row: PriceHistory) -> MarketState:
    """The engine state a row leaves; rows written by hand give price / on-demand as ratio."""
    if row.ratio is not None:
        ratio = row.ratio
    else:
        on_demand = row.spec.on_demand_price_per_minute
        ratio = (row.price / on_demand).quantize(RATIO_PLACES, rounding=ROUND_HALF_UP) if on_demand else FLOOR
    smoothed = row.smoothed_utilization if row.smoothed_utilization is not None else row.utilization
    return MarketState(smoothed_u=smoothed, ratio=clamp_ratio(Decimal(ratio)))


def price_source(instance_type: str) -> PriceSource:
    replay = getattr(settings, "OPENDLC_PRICE_REPLAY", "")
    if replay:
        return replay_source(replay)
    return ModelPriceSource(instance_type, DEFAULT_PARAMS)


@functools.lru_cache(maxsize=4)
def replay_source(config: str) -> ReplayPriceSource:
    """The replay of ``path:machine_type:region[:speed]`` (read once per process and setting)."""
    parts = config.split(":")
    if len(parts) not in (3, 4):
        raise ValueError(f"OPENDLC_PRICE_REPLAY must be path:machine_type:region[:speed], got {config!r}")
    path, machine_type, region = parts[:3]
    speed = int(parts[3]) if len(parts) == 4 else 1
    points = load_gcp_history(path, machine_type, region)
    if not points:
        raise ValueError(f"OPENDLC_PRICE_REPLAY: no rows for {machine_type} in {region} in {path}")
    # start_tick = the first change point's own minute. At speed 1 the replay is the history's
    # calendar and its last price holds after it ends; sped up, it loops so it never goes flat.
    return ReplayPriceSource(points, start_tick=points[0].tick, speed=speed, loop=speed > 1)
