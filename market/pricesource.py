"""Where a pool's price ratio comes from: the demand model, or a replay of a real price history.

Both sources answer the same question each tick — given the pool's state, what it looks like now,
and the tick index, what is the next state — so the market task that records price history does
not care which one drives a pool. A replay source still smooths utilization, so switching a pool
between sources keeps its state meaningful.
"""

from __future__ import annotations

import bisect
import csv
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Protocol, Sequence

from market.engine import (
    DEFAULT_PARAMS, RATIO_PLACES, MarketParams, MarketState, PoolObservation, clamp_ratio, smooth,
    step, tick_of, utilization,
)


class PriceSource(Protocol):
    def advance(self, state: MarketState, obs: PoolObservation, tick: int) -> MarketState:
        """The state of the pool after this tick."""
        ...


@dataclass(frozen=True)
class ModelPriceSource:
    """Prices from supply and demand of the pool (market.engine.step)."""

    pool: str
    params: MarketParams = DEFAULT_PARAMS

    def advance(self, state: MarketState, obs: PoolObservation, tick: int) -> MarketState:
        return step(state, obs, tick, pool=self.pool, params=self.params)


@dataclass(frozen=True)
class ChangePoint:
    """From tick ``tick`` (in history time) on, spot costs ``ratio`` of on-demand."""

    tick: int
    ratio: Decimal


@dataclass(frozen=True)
class ReplayPriceSource:
    """Replays change points, each ratio held until the next one.

    History time is mapped onto our ticks: our tick ``start_tick`` is the first change point, and
    each of our ticks advances history by ``speed`` ticks (speed=1440 replays a history day per
    minute; the GCP list prices change only every few weeks). Before the first point the first
    ratio holds, after the last the last one does — unless ``loop``: then the last ratio holds
    for the mean gap between change points and history starts over at the first one, so a
    finite history drives a pool forever.
    """

    points: Sequence[ChangePoint]
    start_tick: int
    speed: int = 1
    params: MarketParams = DEFAULT_PARAMS
    loop: bool = False
    _ticks: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not self.points:
            raise ValueError("a replay needs at least one change point")
        object.__setattr__(self, "_ticks", tuple(p.tick for p in self.points))

    def ratio_at(self, tick: int) -> Decimal:
        offset = (tick - self.start_tick) * self.speed
        if self.loop and len(self.points) > 1:
            span = self.points[-1].tick - self.points[0].tick
            offset %= span + span // (len(self.points) - 1)
        history_tick = self.points[0].tick + offset
        index = bisect.bisect_right(self._ticks, history_tick) - 1
        return self.points[max(index, 0)].ratio

    def advance(self, state: MarketState, obs: PoolObservation, tick: int) -> MarketState:
        smoothed = smooth(state.smoothed_u, utilization(obs), self.params)
        return MarketState(smoothed_u=smoothed, ratio=self.ratio_at(tick))


def spot_ratio(on_demand: str, spot: str) -> Decimal:
    """spot / on-demand, rounded and kept inside the market's 10 %-100 % band."""
    ratio = Decimal(spot) / Decimal(on_demand)
    return clamp_ratio(ratio.quantize(RATIO_PLACES, rounding=ROUND_HALF_UP))


def load_gcp_history(
    path: str | Path, machine_type: str, region: str, params: MarketParams = DEFAULT_PARAMS
) -> list[ChangePoint]:
    """Change points of one machine type in one region from gcp_gpu_spot_price_history.csv.

    Columns used: commit_time (ISO 8601 with offset), machine_type, region, hour_ondemand_usd,
    hour_spot_usd. Rows are sorted by time (offsets differ) and repeats of a ratio are dropped.
    """
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["machine_type"] == machine_type and r["region"] == region]
    dated = sorted(
        (tick_of(datetime.fromisoformat(r["commit_time"]), params), spot_ratio(r["hour_ondemand_usd"], r["hour_spot_usd"]))
        for r in rows
    )
    points: list[ChangePoint] = []
    for tick, ratio in dated:
        if not points or points[-1].ratio != ratio:
            points.append(ChangePoint(tick, ratio))
    return points
