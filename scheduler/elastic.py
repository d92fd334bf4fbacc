"""Elastic jobs (PAI's ElasticSpec; TorchElastic's `--nnodes=MIN:MAX`): a borrower the lender
reclaims shrinks instead of dying, and a running job grows back into capacity nobody waits for.

A PendingJob with `min_pods` lists all of its MaxParallelism pods; its first `min_pods` pods are
its gang, the rest are optional.

- Admission (`gang`, `widest`): the cycle plans the job as its gang alone, so it starts as soon
  as MinParallelism pods fit; once admitted it takes as many of its other pods as still fit the
  same free capacity, up to all of them.
- Shrink (`spare_only`, `spare_first`, `shrinks`): a pod above its job's minimum
  (`RunningPod.spare`) is a reclaim's first victim. The victim search first looks among spare pods
  alone, and takes them when they suffice, however many jobs they shrink: a shrunk job keeps
  training from its last checkpoint, a job taken whole stops. Only when spare pods cannot make room
  does the usual fewest-victims search run, spare pods still first in its order.
- Growth (`growth_order`, `wanted_scopes`): after every waiting job had its turn, a running elastic
  job below its maximum takes free capacity of its scope (its quota's nodes when its pods are In
  Quota, its lending scope when they borrow), unless a job waits that could use that scope: else
  an elastic job would take each freed GPU before a waiting gang ever fits.

A resize restarts the job's pods from their last checkpoint with the new world size (the
integrator's part); it is not a failure and counts against no restart limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from .capacity import CapacityView, Scope
from .decisions import (
    HELD_BEHIND_HEAD,
    NEVER_FITS,
    PARENT_QUOTA_FULL,
    QUOTA_FULL,
    UNKNOWN_QUOTA,
    WAITING_FOR_TERMINATION,
    Preemption,
    Shrink,
)
from .model import ElasticJob, PendingJob, PodRequest, RunningPod
from .placement import place_gang
from .preemption import Candidates

# A job waiting for one of these reasons cannot use free capacity of its scopes this cycle (or
# already holds what it waits for), so it does not stop elastic jobs from growing there.
NOT_WANTING = frozenset({QUOTA_FULL, PARENT_QUOTA_FULL, UNKNOWN_QUOTA, NEVER_FITS,
                         WAITING_FOR_TERMINATION, HELD_BEHIND_HEAD})


def gang(job: PendingJob) -> PendingJob:
    """The job as the scheduler plans it: its first `min_pods` pods, or the job unchanged."""
    if not job.min_pods or job.min_pods >= len(job.pods):
        return job
    return replace(job, pods=job.pods[:job.min_pods], min_pods=0)


def widest(view: CapacityView, scope: Scope, base: tuple[PodRequest, ...],
           extra: tuple[PodRequest, ...],
           allow: Callable[[tuple[PodRequest, ...]], bool] = lambda reqs: True):
    """The placement of `base` and the longest prefix of `extra` that fits the free capacity of
    `scope` and that `allow` accepts; None when `base` itself does not fit.

    Found by bisection: a prefix that fits leaves every shorter one room."""
    best = place_gang(view, scope, base) if base else []
    if best is None:
        return None
    lo, hi = 0, len(extra)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        more = extra[:mid]
        placed = place_gang(view, scope, base + more) if allow(more) else None
        if placed is None:
            hi = mid - 1
        else:
            lo, best = mid, placed
    return best


def spare_only(candidates: Candidates) -> Candidates:
    """The same victims, in the same order, limited to pods above their job's minimum."""
    eligible = candidates.eligible
    return Candidates(candidates.view, lambda p: p.spare and eligible(p), candidates.order)


def spare_first(order: Callable[[RunningPod], tuple]) -> Callable[[RunningPod], tuple]:
    """A victim order with pods above their job's minimum ahead of every other pod."""
    return lambda pod: (not pod.spare,) + order(pod)


def shrinks(pods: Iterable[RunningPod], preemptions: list[Preemption],
            ) -> tuple[list[Preemption], list[Shrink]]:
    """Preemptions that take only spare pods of a job shrink it: their messages say so
    ("Shrunk from 8 to 4 workers: reclaimed by quota cv-team for job j"), and each such job gets a
    Shrink. A job that also lost a pod within its minimum ends whole, as any other job."""
    live: dict[str, int] = {}
    spare: set[str] = set()
    for pod in pods:
        if not pod.terminating:
            live[pod.job_id] = live.get(pod.job_id, 0) + 1
        if pod.spare:
            spare.add(pod.pod_id)
    by_job: dict[str, list[Preemption]] = {}
    for p in preemptions:
        by_job.setdefault(p.job_id, []).append(p)
    out, resized = [], []
    for job_id, group in by_job.items():
        if not all(p.pod_id in spare for p in group):
            out += group
            continue
        before = live[job_id]
        after = before - len(group)
        head = f"Shrunk from {before} to {after} workers: "
        out += [replace(p, reason=replace(p.reason, message=head + _lower_first(p.reason.message)))
                for p in group]
        resized.append(Shrink(job_id, before, after, head + _lower_first(group[0].reason.message)))
    return out, sorted(resized, key=lambda s: s.job_id)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def growth_order(jobs: Iterable[ElasticJob]) -> list[ElasticJob]:
    """Higher priority first, then the job with fewer workers, then job id."""
    return sorted(jobs, key=lambda j: (-j.priority, j.workers, j.job_id))


def wanted_scopes(waiting: dict[str, tuple], scopes_of: Callable[[str], tuple]) -> set[tuple]:
    """The keys of the scopes some waiting job could use free capacity of: no elastic job grows
    there. `waiting`: job id -> (code, ...); scopes_of(job id) -> the scopes of its quota."""
    wanted: set[tuple] = set()
    for job_id, (code, *_rest) in waiting.items():
        if code not in NOT_WANTING:
            wanted.update(s.key for s in scopes_of(job_id))
    return wanted
