"""Figures of one replay: queueing delay, makespan, utilization, preemptions, work lost."""

from __future__ import annotations

import math
from collections import Counter
from itertools import pairwise

from scheduler import FORCE

from .engine import SPOT, JobRun, Result

HOUR = 3600
# (name, most GPUs) of the job-size groups, smallest first.
SIZE_GROUPS = (("1", 1), ("2-4", 4), ("5-7", 7), ("8", 8), ("> 8", math.inf))
PUBLIC_POOL = "public pool (spot)"


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of an ascending list."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def delays(result: Result) -> list[int]:
    """Queueing delay of every replayed job: first start minus submit, ascending."""
    return _delays(result.jobs)


def _delays(runs: list[JobRun]) -> list[int]:
    return sorted(r.first_start - r.job.submit for r in runs if r.first_start is not None)


def queueing(d: list[int]) -> dict:
    """Mean, median, p95 and max of ascending queueing delays (s)."""
    return {"mean": round(sum(d) / len(d), 1) if d else 0.0,
            "median": percentile(d, 0.5), "p95": percentile(d, 0.95),
            "max": d[-1] if d else 0}


def size_group(gpus: int) -> str:
    """The job-size group of the breakdown; 5-7 GPUs has a group so that no job falls out."""
    return next(name for name, most in SIZE_GROUPS if gpus <= most)


def breakdown(result: Result) -> list[dict]:
    """Queueing, preemptions and work lost of all jobs, then by job size, by quota (virtual
    cluster, or the public pool for spot jobs) and by Idle Resources mode; empty groups are
    left out."""
    names = [n for n, _ in SIZE_GROUPS]
    groups = [("total", lambda r: "all jobs", None),
              ("size", lambda r: size_group(r.job.gpus), names.index),
              ("quota", lambda r: PUBLIC_POOL if r.mode == SPOT else r.job.vc, None),
              ("mode", lambda r: r.mode, None)]
    rows = []
    for by, key, order in groups:
        members: dict[str, list[JobRun]] = {}
        for run in result.jobs:
            members.setdefault(key(run), []).append(run)
        for name in sorted(members, key=order):
            rows.append(_group_row(result.policy, by, name, members[name]))
    return rows


def _group_row(policy: str, by: str, name: str, runs: list[JobRun]) -> dict:
    d = _delays(runs)
    return {"policy": policy, "by": by, "group": name, "jobs": len(runs), "started": len(d),
            "queueing_delay_s": queueing(d),
            "preemptions": sum(r.preemptions for r in runs),
            "gpu_hours_lost": round(sum(r.lost_gpu_s for r in runs) / HOUR, 1)}


LARGE_GPUS = 8
LARGE_WAIT_TARGET = 3.0  # issue #32: large jobs wait at most 3 times as long as 1-GPU jobs


def large_job_wait(result: Result) -> list[dict]:
    """Per quota, the mean queueing of its jobs of 8 GPUs or more against its 1-GPU jobs, among the
    jobs that may run on its guarantee (Only Idle and spot jobs never do), highest ratio first:
    whether large gangs starve behind a stream of small jobs of their own team."""
    by_quota: dict[str, tuple[list[JobRun], list[JobRun]]] = {}
    for run in result.jobs:
        if run.mode in (FORCE, SPOT) or 1 < run.job.gpus < LARGE_GPUS:
            continue
        small, large = by_quota.setdefault(run.job.vc, ([], []))
        (small if run.job.gpus == 1 else large).append(run)
    rows = []
    for quota, (small, large) in by_quota.items():
        one, big = _delays(small), _delays(large)
        if not (one and big):
            continue
        mean_one, mean_big = sum(one) / len(one), sum(big) / len(big)
        rows.append({"quota": quota, "jobs_1_gpu": len(one), "jobs_large": len(big),
                     "mean_1_gpu_s": round(mean_one, 1), "mean_large_s": round(mean_big, 1),
                     # A 1-GPU mean under a second counts as one: the ratio stays finite.
                     "ratio": round(mean_big / max(mean_one, 1.0), 2)})
    return sorted(rows, key=lambda r: (-r["ratio"], r["quota"]))


def busy_gpu_seconds(busy: list[tuple[int, int]], end: int) -> int:
    total = 0
    for (t, gpus), (t_next, _) in zip(busy, busy[1:] + [(end, 0)]):
        total += gpus * (t_next - t)
    return total


def utilization_series(result: Result, bin_s: int = 6 * HOUR) -> tuple[list[int], list[float]]:
    """Mean share of all GPUs in use per bin: (bin start times in s, fractions)."""
    end = makespan_end(result)
    bins = [0.0] * (end // bin_s + 1)
    steps = result.busy + [(end, 0)]
    for (t, gpus), (t_next, _) in pairwise(steps):
        while t < t_next:
            edge = min(t_next, (t // bin_s + 1) * bin_s)
            bins[t // bin_s] += gpus * (edge - t)
            t = edge
    return ([i * bin_s for i in range(len(bins))],
            [b / (bin_s * result.total_gpus) for b in bins])


def makespan_end(result: Result) -> int:
    return max((r.end for r in result.jobs if r.end is not None), default=0)


def summary(result: Result) -> dict:
    d = delays(result)
    start = min((r.job.submit for r in result.jobs), default=0)
    end = makespan_end(result)
    span = max(end - start, 1)
    lost = sum(r.lost_gpu_s for r in result.jobs)
    unfinished = sum(1 for r in result.jobs if r.end is None)
    started = [r for r in result.jobs if r.first_start is not None]
    busy = busy_gpu_seconds(result.busy, end)
    return {
        "policy": result.policy,
        "backfill": result.backfill,
        "checkpoint_minutes": result.checkpoint_s / 60 if result.checkpoint_s else None,
        "jobs_replayed": len(result.jobs),
        "jobs_unfinished": unfinished,
        "jobs_skipped": sum(result.skipped.values()),
        "skipped_by_reason": dict(sorted(result.skipped.items())),
        "queueing_delay_s": queueing(d),
        "queueing_incl_requeue_mean_s": (round(sum(r.waited for r in started) / len(started), 1)
                                         if started else 0.0),
        "jobs_started_at_once": sum(1 for x in d if x == 0),
        "makespan_s": span,
        "makespan_days": round(span / 86400, 2),
        "total_gpus": result.total_gpus,
        # Allocated GPU time, work later lost included; "useful" leaves the lost work out.
        "gpu_utilization": round(busy / (result.total_gpus * span), 4),
        "gpu_utilization_useful": round((busy - lost) / (result.total_gpus * span), 4),
        "jobs_run_not_in_quota": sum(1 for r in result.jobs if r.borrowed_runs),
        "preemptions": sum(r.preemptions for r in result.jobs),
        "jobs_preempted": sum(1 for r in result.jobs if r.preemptions),
        "gpu_hours_lost": round(lost / HOUR, 1),
        # The share of allocated GPU time whose work was kept.
        "goodput": round((busy - lost) / busy, 4) if busy else 0.0,
        "shrinks": sum(r.shrinks for r in result.jobs),
        "growths": sum(r.growths for r in result.jobs),
        "gpu_hours_lost_to_resizes": round(result.resize_lost_gpu_s / HOUR, 1),
        "cycles": result.cycles,
        "plan_seconds": round(result.plan_s, 2),
        "wall_seconds": round(result.wall_s, 2),
        "cycles_over_round_limit": result.rounds_exceeded,
        "jobs_with_trace_mode": sum(1 for r in result.jobs if r.job.oversold_type),
        "modes": dict(sorted(Counter(r.mode for r in result.jobs).items())),
        "breakdown": breakdown(result),
        "large_job_wait": large_job_wait(result),
    }
