"""Reservations with backfill (EASY, as Slurm's backfill scheduler does it).

A queue whose quota has `backfill` on gives the first job of it that waits, its head, a
reservation: the earliest time its gang fits the quota's own nodes, counting each running pod as
gone at its expected end (a borrower, which the head may reclaim, as soon as it may: gone_at),
and the nodes it fits then. Free capacity of those nodes that the head will need at that time is
held through the In Quota pass (CapacityView.block): a job behind it starts In Quota only on
capacity the head does not need, or, if its maximum running time ends it before the
reservation's time, on the held capacity too (an estimate is not enough: see ends_before). Then
borrowers may use what is held: they are preemptible, and the head reclaims them once the rest of
its nodes is free. No job planned after the head preempts a pod on those nodes (the head counts
on each of them ending), and a job whose In Quota turn comes in the second pass (held behind a
StrictFIFO head that borrows) does not start on them. Nothing is kept across cycles: each cycle computes the reservation again from its own
now, and the held capacity is free again to that computation, so the reserved nodes stay the
head's first choice.

Expected ends. A job is expected to run for its maximum running time where it has one (a running
pod's `expected_end`, set by the snapshot), else for its quota's typical run: the median run of
the quota's jobs that finished in the last TYPICAL_DAYS (`typical_run`; the live snapshot and the
trace replay both compute it so, and give it as Quota.typical_run). A pod past its expected end,
or whose end is not known, is expected to end OVERDUE_STEP from now (see counted_end): a job that
outlives its estimate moves the reservation's time, not the capacity held on its nodes, which no
longer In Quota job gets, so the head is not starved.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .capacity import CapacityView, Scope
from .model import KIND_IDLE, PendingJob, Quota, RunningPod
from .placement import place_gang

OVERDUE_STEP = timedelta(minutes=5)
TYPICAL_DAYS = 14


def typical_run(runs: Iterable[timedelta]) -> timedelta | None:
    """A quota's typical run from its jobs' runs that finished in the last TYPICAL_DAYS."""
    runs = list(runs)
    return statistics.median_low(runs) if runs else None


def expected_end(started_at: datetime, max_run: timedelta | None,
                 typical_run: timedelta | None) -> datetime | None:
    """When a job started at `started_at` is expected to end (None: no estimate)."""
    run = max_run or typical_run
    return None if run is None else started_at + run


def ends_before(job: PendingJob, at: datetime, now: datetime) -> bool:
    """Whether a job started now is sure to end by `at`: only a maximum running time, which the
    platform enforces, says so. A typical run is an estimate: a job backfilled on it that outlives
    it would sit on the held capacity, and the reservation would slip for as long as it runs."""
    return job.max_run is not None and now + job.max_run <= at


def pod_end(pod: RunningPod, quotas: dict[str, Quota]) -> datetime | None:
    """A running pod's expected end: its own (from a maximum running time), else its quota's
    typical run from its start."""
    if pod.expected_end is not None:
        return pod.expected_end
    quota = quotas.get(pod.quota_id or "")
    return expected_end(pod.started_at, None, quota.typical_run if quota else None)


def counted_end(end: datetime | None, now: datetime) -> datetime:
    """The time a pod is counted as gone: its expected end, at the earliest now + OVERDUE_STEP,
    plus a thousandth of its overrun, so that of two overdue pods the one that has overrun less
    is counted to end first (runs are heavy-tailed: the longer one has run, the longer it runs)."""
    soonest = now + OVERDUE_STEP
    if end is None:
        return soonest
    return end if end >= soonest else soonest + (soonest - end) / 1000


def gone_at(pod: RunningPod, quotas: dict[str, Quota], now: datetime) -> datetime:
    """When the head counts a pod on its quota's node as gone. A borrower is the head's to reclaim
    once its own quota's minimum runtime has passed (as plan() reclaims), so it counts as gone
    then, not at its own end: else a later job could reclaim it from a node the head did not
    reserve, the head would then reserve the freed node, and the borrower would come back to the
    capacity held there, cycle after cycle."""
    if pod.kind == KIND_IDLE:
        owner = quotas.get(pod.quota_id or "")
        protected = pod.started_at + timedelta(seconds=owner.min_runtime_s if owner else 0)
        return max(now, protected)
    return counted_end(pod_end(pod, quotas), now)


@dataclass
class Reservation:
    job: PendingJob
    queue: str
    at: datetime
    nodes: tuple[str, ...]
    held: dict[str, tuple]  # node -> what CapacityView.block held there
    admitted_before: int  # admissions made before it: the ones after it in its queue backfilled


def find(view: CapacityView, scope: Scope, job: PendingJob, quotas: dict[str, Quota],
         now: datetime):
    """(time, placement, capacity freed by then per node) of the earliest fit, or None when the
    gang would not fit the scope even with every pod gone."""
    by_time: dict[datetime, dict[str, list[int]]] = {}
    for name in scope.names:
        for pod in view.states[name].pods:
            acc = by_time.setdefault(gone_at(pod, quotas, now), {}).setdefault(
                name, [0, 0, 0])
            for i, amount in enumerate(pod.resources.as_tuple()):
                acc[i] += amount
    times = sorted(by_time)

    def freed(k: int) -> dict[str, tuple[int, int, int]]:
        out: dict[str, list[int]] = {}
        for t in times[:k]:
            for name, amounts in by_time[t].items():
                acc = out.setdefault(name, [0, 0, 0])
                for i in range(3):
                    acc[i] += amounts[i]
        return {name: tuple(acc) for name, acc in out.items()}

    def fit(k: int):
        return place_gang(view, scope, job.pods, combined=True, extra=freed(k))

    # Capacity only grows with time, so the earliest fit is found by bisection.
    if fit(len(times)) is None:
        return None
    lo, hi = 0, len(times)
    while lo < hi:
        mid = (lo + hi) // 2
        if fit(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    at = times[lo - 1] if lo else now
    return at, fit(lo), freed(lo)


def to_hold(view: CapacityView, placed, freed: dict[str, tuple[int, int, int]]
            ) -> dict[str, tuple[int, int, int]]:
    """Per node, what the head needs at its time beyond what running pods free by then: the
    releasing capacity of terminating pods first, then free capacity."""
    need: dict[str, list[int]] = {}
    for req, name in placed:
        acc = need.setdefault(name, [0, 0, 0])
        for i, amount in enumerate(req.resources.as_tuple()):
            acc[i] += amount
    out = {}
    for name, amounts in sorted(need.items()):
        state = view.states[name]
        more = freed.get(name, (0, 0, 0))
        hold = tuple(min(state.free[i] + max(state.releasing[i], 0), max(0, amounts[i] - more[i]))
                     for i in range(3))
        if any(hold):
            out[name] = hold
    return out


def describe(reservation: Reservation, backfilled: int, now: datetime) -> str:
    nodes = reservation.nodes
    where = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {', '.join(nodes)}"
    return (f"Reserved {where} from about {_clock(reservation.at, now)}; "
            f"{backfilled} smaller job(s) backfilled meanwhile")


def _clock(at: datetime, now: datetime) -> str:
    zone = " UTC" if at.utcoffset() == timedelta(0) else ""
    return f"{at:%H:%M}{zone}" if at.date() == now.date() else f"{at:%b %d %H:%M}{zone}"
