"""A synthetic but realistic price history for the demo's History Price chart.

``backfill_history(days, now)`` runs the real price engine (market.engine) over the past ``days``
of every public pool with synthetic demand, and records a PriceHistory row every
``step_minutes`` (5 by default: 2,016 rows a type for a week, which the chart draws at once and
a demo seed writes in well under a second; a 1-minute backfill is 10,080 rows a type). The live
market tick then continues from the last row, whose engine state it reads.

Synthetic demand, as a share of the pool, is a pure function of (instance type, time): a daily
wave peaking at 14:00 UTC, quieter weekends, a faster three-hour wave, and a per-type level and
phase taken from a hash of the instance type, so each type has its own curve and the same
``now`` always gives the same history. Spot demand is a third of the total.

Idempotent: rows are bulk-created ignoring conflicts on (spec, at), so running it again, or
over a range the live tick already recorded, keeps the rows that exist.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from market.engine import (
    MarketParams, PoolObservation, initial_state, market_price, step, tick_of, time_of, utilization,
)
from scheduler.spot import stock_status
from spot.models import PriceHistory
from spot.pool import PoolUsage, public_pools

SCALE = 1000  # the synthetic pool's capacity in units: demand shares become integers
BATCH = 2000


@transaction.atomic
def backfill_history(days: int = 7, now: datetime | None = None, *, step_minutes: int = 5) -> int:
    """Record ``days`` of synthetic history for every public pool, ending at ``now``; rows written."""
    now = now or timezone.now()
    params = MarketParams(tick_minutes=step_minutes)
    last_tick = tick_of(now, params)
    first_tick = last_tick - days * 24 * 60 // step_minutes + 1
    before = PriceHistory.objects.count()
    for _, pool in sorted(public_pools().items()):
        rows = list(_history(pool, first_tick, last_tick, params))
        PriceHistory.objects.bulk_create(rows, batch_size=BATCH, ignore_conflicts=True)
    return PriceHistory.objects.count() - before


def _history(pool: PoolUsage, first_tick: int, last_tick: int, params: MarketParams):
    spec, name = pool.spec, pool.spec.instance_type
    state = initial_state(_observation(name, time_of(first_tick, params)), params)
    for tick in range(first_tick, last_tick + 1):
        at = time_of(tick, params)
        obs = _observation(name, at)
        state = step(state, obs, tick, pool=name, params=params)
        yield PriceHistory(
            spec=spec, at=at, price=market_price(state.ratio, spec.on_demand_price_per_minute),
            ratio=state.ratio, smoothed_utilization=state.smoothed_u, utilization=utilization(obs),
            stock_status=_stock(pool.nodes, obs),
        )


def _stock(nodes: int, obs: PoolObservation) -> str:
    """SpotStockStatus of the synthetic pool, its free share taken as whole nodes of the real one."""
    free = obs.capacity - obs.payg_in_use - obs.spot_in_use
    return stock_status(nodes, free * nodes // obs.capacity)


def synthetic_share(instance_type: str, at: datetime) -> float:
    """Share of the pool in demand at ``at`` (may exceed 1 at a busy type's peak)."""
    digest = hashlib.sha256(instance_type.encode()).digest()
    level, phase = 0.8 + 0.35 * digest[0] / 255, digest[1] / 255
    minute = at.hour * 60 + at.minute
    daily = 0.45 + 0.32 * math.sin(2 * math.pi * (minute - 8 * 60) / 1440)  # peaks at 14:00
    fast = 0.07 * math.sin(2 * math.pi * (minute / 180 + phase))
    weekend = -0.15 if at.weekday() >= 5 else 0.0
    return max(level * (daily + fast + weekend), 0.0)


def _observation(instance_type: str, at: datetime) -> PoolObservation:
    demand = round(SCALE * synthetic_share(instance_type, at))
    in_use = min(demand, SCALE)
    spot = in_use // 3
    return PoolObservation(SCALE, payg_in_use=in_use - spot, spot_in_use=spot, spot_queued=demand - in_use)
