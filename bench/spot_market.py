"""Benchmark of the spot market: engine speed, and what a spot fleet pays over a day.

    python bench/spot_market.py [--seed 7] [--jobs 80] [--capacity 64]

(a) times one day of one-minute ticks (1,440) for 20 instance types through market.engine.step;
(b) replays one public pool for a day in virtual time around the real scheduler.plan, as
tracesim/ does for quotas: pay-as-you-go demand in waves (jobs of one node that come and go), a
seeded fleet of spot jobs with discount bids 0.1-0.9 (market.bids.bid_price) and protection
periods of 0 or 1 hour. Each minute the market ticks on the pool's use and the bids that pay its
price, then schedule cycles run until nothing more is preempted: plan() releases outbid spot
outside its protection period, gives pay-as-you-go the inventory first (releasing spot for
stock), and admits the highest bids at or above the price while the pool has stock beyond the
pay-as-you-go reserve. Preempted pods stop at once; a released spot job re-enters bidding with
its work kept (fault tolerance on). The fleet is billed with market.billing and compared with the
same pod-minutes at the on-demand price. Pure: no Django.
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

from bench.harness import reference_loop_s, speed  # noqa: E402
from market.bids import bid_price  # noqa: E402
from market.billing import SPOT, PodUsage, PriceSeries, daily_bills  # noqa: E402
from market.engine import (  # noqa: E402
    PoolObservation, average_price, initial_state, market_price, queued_demand, step,
)
from scheduler import (  # noqa: E402
    ECS, KIND_PAYG, KIND_SPOT, SOURCE_PAYG, SOURCE_SPOT, MarketState, Node, PendingJob, PodRequest,
    Resources, RunningPod, Snapshot, plan,
)
from scheduler.decisions import OUTBID, STOCK_SHORT  # noqa: E402

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
    pods: tuple[RunningPod, ...] = ()


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


# One instance of the pool: a pod of the pool takes a whole node.
INSTANCE = Resources(8, 96_000, 768 * 1024)
REASONS = {OUTBID: "price", STOCK_SHORT: "stock"}
MAX_ROUNDS = 10  # cycles in one minute; more means this replay and the scheduler disagree


def at(minute: int) -> datetime:
    return START + timedelta(minutes=minute)


class PoolDay:
    """One public pool in virtual time around scheduler.plan: the cluster the scheduler sees is
    this object's nodes, running pods and waiting jobs, changed only by its decisions."""

    def __init__(self, seed: int, count: int, capacity: int):
        self.rng = random.Random(seed)
        self.capacity = capacity
        self.jobs = make_fleet(self.rng, count)
        self.by_name = {j.name: j for j in self.jobs}
        self.nodes = tuple(Node(f"pub-{i:03d}", POOL, INSTANCE) for i in range(capacity))
        self.payg_running: dict[str, RunningPod] = {}
        self.payg_waiting: list[str] = []
        self.payg_ids = 0
        self.state, self.prices, self.last_hour = initial_state(), {}, []
        self.cycles, self.seconds = 0, 0.0

    def run(self) -> PoolDay:
        for minute in range(DAY):
            self._payg_to(payg_demand(self.rng, minute, self.capacity), minute)
            market = self._tick(minute)
            for _ in range(MAX_ROUNDS):
                self.cycles += 1
                if not self._apply(plan(self._snapshot(minute, market), at(minute)), minute):
                    break
            for job in self.jobs:
                if job.started is not None:
                    job.remaining -= 1
                    if job.remaining == 0:
                        self._stop(job, minute + 1, None)
        for job in self.jobs:
            if job.started is not None:
                self._stop(job, DAY, None)
        return self

    def _payg_to(self, demand: int, minute: int) -> None:
        """Pay-as-you-go jobs of one node each come (waiting for the scheduler) and go (waiting
        ones first, then the most recently started)."""
        while len(self.payg_running) + len(self.payg_waiting) < demand:
            self.payg_ids += 1
            self.payg_waiting.append(f"payg-{self.payg_ids:05d}")
        surplus = len(self.payg_running) + len(self.payg_waiting) - demand
        while surplus > 0 and self.payg_waiting:
            self.payg_waiting.pop()
            surplus -= 1
        for name in sorted(self.payg_running, key=lambda n: self.payg_running[n].started_at,
                           reverse=True)[:max(surplus, 0)]:
            del self.payg_running[name]

    def _tick(self, minute: int) -> MarketState:
        """One market tick on the pool's use and the waiting bids that pay the current price."""
        spot = sum(j.nodes for j in self.jobs if j.started is not None)
        queued = queued_demand(((j.bid, j.nodes) for j in self._bidding(minute)),
                               market_price(self.state.ratio, ON_DEMAND))
        obs = PoolObservation(self.capacity, len(self.payg_running), spot, queued)
        self.state = step(self.state, obs, minute, pool=POOL)
        price = self.prices[at(minute)] = market_price(self.state.ratio, ON_DEMAND)
        self.last_hour = (self.last_hour + [price])[-60:]
        return MarketState(POOL, price, average_price(self.last_hour), ECS)

    def _bidding(self, minute: int) -> list[SpotJob]:
        return [j for j in self.jobs if j.started is None and j.remaining > 0 and j.arrival <= minute]

    def _snapshot(self, minute: int, market: MarketState) -> Snapshot:
        pods = tuple(self.payg_running.values()) + tuple(p for j in self.jobs for p in j.pods)
        waiting = [PendingJob(name, at(0), (PodRequest("worker", 0, INSTANCE, POOL),),
                              source=SOURCE_PAYG) for name in self.payg_waiting]
        waiting += [PendingJob(j.name, at(j.arrival),
                               tuple(PodRequest("worker", i, INSTANCE, POOL) for i in range(j.nodes)),
                               source=SOURCE_SPOT, bid=j.bid) for j in self._bidding(minute)]
        return Snapshot(self.nodes, (), pods, tuple(waiting), (market,))

    def _apply(self, decisions, minute: int) -> bool:
        """Start the admitted jobs, stop the preempted ones; True when something was preempted
        (its capacity is free at once, so the next cycle of this minute can give it away)."""
        for a in decisions.admissions:
            if a.kind == KIND_PAYG:
                self.payg_waiting.remove(a.job_id)
                [pl] = a.placements
                self.payg_running[a.job_id] = RunningPod(f"{a.job_id}-0", a.job_id, pl.node, INSTANCE,
                                                         KIND_PAYG, at(minute), gpu_indices=pl.gpu_indices)
            else:
                self._start(self.by_name[a.job_id], a, minute)
        preempted = {p.job_id: p.reason.code for p in decisions.preemptions}
        for job_id, code in sorted(preempted.items()):
            self._stop(self.by_name[job_id], minute, REASONS[code])
        return bool(preempted)

    def _start(self, job: SpotJob, admission, minute: int) -> None:
        assert admission.kind == KIND_SPOT
        job.started = minute
        until = at(minute + job.protection) if job.protection else None
        job.pods = tuple(RunningPod(f"{job.name}-{pl.index}", job.name, pl.node, INSTANCE, KIND_SPOT,
                                    at(minute), gpu_indices=pl.gpu_indices, bid=job.bid,
                                    protection_until=until)
                         for pl in admission.placements)

    def _stop(self, job: SpotJob, minute: int, reason: str | None) -> None:
        job.intervals.append((at(job.started), at(minute)))
        job.started, job.pods = None, ()
        if reason:
            job.releases[reason] += 1


def simulate(seed: int, count: int, capacity: int) -> PoolDay:
    began = time.perf_counter()
    day = PoolDay(seed, count, capacity).run()
    day.seconds = time.perf_counter() - began
    return day


def report_fleet(seed: int, count: int, capacity: int) -> None:
    day = simulate(seed, count, capacity)
    jobs, prices = day.jobs, day.prices
    usages = [PodUsage(j.name, f"{j.name}-worker-{n}", POOL, SPOT, j.intervals) for j in jobs for n in range(j.nodes)]
    bills = daily_bills(usages, {POOL: ON_DEMAND}, {POOL: PriceSeries(prices)})
    paid = sum((b.amount for b in bills), Decimal(0))
    payg = sum((b.on_demand_amount for b in bills), Decimal(0))
    releases = sum((j.releases for j in jobs), Counter())
    released_jobs = sum(1 for j in jobs if j.releases)
    done = sum(1 for j in jobs if j.remaining == 0)
    ratios = [p / ON_DEMAND for p in prices.values()]
    print(f"(b) fleet of {count} spot jobs, pool of {capacity} nodes, seed {seed}, one simulated day "
          f"({day.cycles} cycles of scheduler.plan, {day.seconds:.2f} s)")
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
    before = reference_loop_s()
    seconds = bench_engine()
    print(f"(a) 20 instance types x {DAY} one-minute ticks: {seconds:.3f} s "
          f"({seconds / (20 * DAY) * 1e6:.1f} us per tick)")
    report_fleet(args.seed, args.jobs, args.capacity)
    print(speed(before))


if __name__ == "__main__":
    main()
