"""Benchmark of the pure spot market: engine speed, and what a spot fleet pays over a day.

    python bench/spot_market.py [--seed 7] [--jobs 80] [--capacity 64]

(a) times one day of one-minute ticks (1,440) for 20 instance types through market.engine.step;
(b) simulates one pool for a day: pay-as-you-go demand in waves, a seeded fleet of spot jobs with
discount bids 0.1-0.9 and protection periods of 0 or 1 hour. Each minute: pay-as-you-go takes
inventory first (spot released for shortage, lowest bid first), the market ticks, spot outbid
outside its protection period is released and re-enters bidding (fault tolerance on, work kept),
then waiting bids are admitted highest first while the bid holds and stock is WithStock. The fleet
is billed with market.billing and compared with the same pod-minutes at the on-demand price.
Uses only the pure modules; no Django.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from market.bids import bid_holds, bid_price  # noqa: E402
from market.billing import SPOT, PodUsage, PriceSeries, daily_bills  # noqa: E402
from market.engine import PoolObservation, initial_state, market_price, queued_demand, step  # noqa: E402
from market.inventory import WITH_STOCK, spot_shortage, stock_status  # noqa: E402

DAY = 1440
START = datetime(2026, 3, 2, tzinfo=timezone.utc)
ON_DEMAND = Decimal("0.500000")  # per node-minute (30.00 per node-hour)
POOL = "ecs.gn7-c12g1.3xlarge"


def bench_engine(instance_types: int = 20) -> float:
    """Seconds to tick every instance type through a day with a moving demand."""
    began = time.perf_counter()
    for i in range(instance_types):
        state, pool = initial_state(), f"type-{i}"
        for minute in range(DAY):
            busy = int(50 + 45 * math.sin(2 * math.pi * (minute + 60 * i) / DAY))
            state = step(state, PoolObservation(100, payg_in_use=busy, spot_queued=i), minute, pool=pool)
    return time.perf_counter() - began


@dataclass
class SpotJob:
    name: str
    arrival: int
    nodes: int
    remaining: int
    discount: Decimal
    protection: int  # minutes
    bid: Decimal = Decimal(0)
    started: int | None = None  # start of the current run
    intervals: list = field(default_factory=list)
    releases: Counter = field(default_factory=Counter)


def make_fleet(rng: random.Random, count: int) -> list[SpotJob]:
    jobs = []
    for i in range(count):
        discount = Decimal(rng.randint(1, 9)) / 10
        job = SpotJob(f"dlc-{i:03d}", rng.randrange(0, 20 * 60), rng.choice([1, 1, 2, 4]),
                      rng.randint(30, 240), discount, rng.choice([0, 60]))
        job.bid = bid_price(ON_DEMAND, discount=discount)
        jobs.append(job)
    return jobs


def payg_demand(rng: random.Random, minute: int, capacity: int) -> int:
    """A daily wave peaking at 14:00 plus a faster three-hour wave and jitter."""
    daily = 0.45 + 0.30 * math.sin(2 * math.pi * (minute - 8 * 60) / DAY)
    fast = 0.10 * math.sin(2 * math.pi * minute / 180)
    return max(0, round(capacity * (daily + fast + rng.uniform(-0.03, 0.03))))


def stop(job: SpotJob, minute: int, reason: str | None) -> None:
    job.intervals.append((START + timedelta(minutes=job.started), START + timedelta(minutes=minute)))
    job.started = None
    if reason:
        job.releases[reason] += 1


def release_for_shortage(running: list[SpotJob], minute: int, short: int) -> None:
    """Lowest bid first, then the most recently started; never inside the protection period."""
    for job in sorted(running, key=lambda j: (j.bid, -j.started)):
        if short <= 0:
            return
        if minute - job.started >= job.protection:
            stop(job, minute, "stock")
            short -= job.nodes


def admit(waiting: list[SpotJob], minute: int, price: Decimal, capacity: int, payg: int, spot: int) -> int:
    for job in sorted(waiting, key=lambda j: (-j.bid, j.arrival)):
        if bid_holds(job.bid, price) and stock_status(capacity, payg, spot, job.nodes) == WITH_STOCK:
            job.started = minute
            spot += job.nodes
    return spot


def simulate(seed: int, count: int, capacity: int):
    rng = random.Random(seed)
    jobs, state, prices = make_fleet(rng, count), initial_state(), {}
    for minute in range(DAY):
        running = [j for j in jobs if j.started is not None]
        demand = payg_demand(rng, minute, capacity)
        release_for_shortage(running, minute, spot_shortage(capacity, demand, sum(j.nodes for j in running)))
        running = [j for j in jobs if j.started is not None]
        spot = sum(j.nodes for j in running)
        payg = min(demand, capacity - spot)
        waiting = [j for j in jobs if j.started is None and j.remaining > 0 and j.arrival <= minute]
        queued = queued_demand(((j.bid, j.nodes) for j in waiting), market_price(state.ratio, ON_DEMAND))
        obs = PoolObservation(capacity, payg, spot, queued)
        state = step(state, obs, minute, pool=POOL)
        price = prices[START + timedelta(minutes=minute)] = market_price(state.ratio, ON_DEMAND)
        for job in running:
            if not bid_holds(job.bid, price) and minute - job.started >= job.protection:
                stop(job, minute, "price")
                waiting.append(job)
        spot = admit(waiting, minute, price, capacity, payg, sum(j.nodes for j in jobs if j.started is not None))
        for job in jobs:
            if job.started is not None:
                job.remaining -= 1
                if job.remaining == 0:
                    stop(job, minute + 1, None)
    for job in jobs:
        if job.started is not None:
            stop(job, DAY, None)
    return jobs, prices


def report_fleet(seed: int, count: int, capacity: int) -> None:
    jobs, prices = simulate(seed, count, capacity)
    usages = [PodUsage(j.name, f"{j.name}-worker-{n}", POOL, SPOT, j.intervals) for j in jobs for n in range(j.nodes)]
    bills = daily_bills(usages, {POOL: ON_DEMAND}, {POOL: PriceSeries(prices)})
    paid = sum((b.amount for b in bills), Decimal(0))
    payg = sum((b.on_demand_amount for b in bills), Decimal(0))
    releases = sum((j.releases for j in jobs), Counter())
    released_jobs = sum(1 for j in jobs if j.releases)
    done = sum(1 for j in jobs if j.remaining == 0)
    ratios = [p / ON_DEMAND for p in prices.values()]
    print(f"(b) fleet of {count} spot jobs, pool of {capacity} nodes, seed {seed}, one simulated day")
    print(f"    market price: min {min(ratios):.3f}  mean {sum(ratios) / len(ratios):.3f}  max {max(ratios):.3f} of on-demand")
    print(f"    finished {done}/{count}; never started {sum(1 for j in jobs if not j.intervals)}")
    print(f"    released: {released_jobs} jobs, {releases['price']} times outbid, {releases['stock']} times for stock")
    print(f"    node-minutes {sum(b.minutes for b in bills)}; paid {paid:.2f} vs pay-as-you-go {payg:.2f}; "
          f"savings {payg - paid:.2f} ({100 * (payg - paid) / payg:.1f} %)")
    for discount in sorted({j.discount for j in jobs}):
        group = [j for j in jobs if j.discount == discount]
        print(f"      discount {discount}: {len(group):3d} jobs, {sum(j.remaining == 0 for j in group):3d} finished, "
              f"{sum(sum(j.releases.values()) for j in group):3d} releases")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=80)
    parser.add_argument("--capacity", type=int, default=64)
    args = parser.parse_args()
    seconds = bench_engine()
    print(f"(a) 20 instance types x {DAY} one-minute ticks: {seconds:.3f} s "
          f"({seconds / (20 * DAY) * 1e6:.1f} us per tick)")
    report_fleet(args.seed, args.jobs, args.capacity)


if __name__ == "__main__":
    main()
