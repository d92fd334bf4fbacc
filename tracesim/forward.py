"""Estimated starts: the real `scheduler.plan` run forward in virtual time from a live snapshot.

engine.Replay replays a trace's arrivals on a cluster it builds from virtual clusters; this starts
from the cluster as a schedule cycle sees it (the `scheduler.Snapshot` it plans on) and takes no
arrivals. The clock jumps from one end of a run to the next, as in the replay:

  1. at each time, the runs that end then free their pods (pods already terminating are gone
     from the start: they are being stopped);
  2. cycles run at that time until one preempts nothing and leaves no job out that may fit: an admitted job
     records its first start and ends at now + its assumed duration; a preempted one re-queues
     from that time (as AIMaster re-queues it) with the work since its last checkpoint still to do;
  3. it stops once every job of the snapshot's queue has started, no run is left to end, or the
     next end lies past the horizon: jobs not started by then get None.

When running jobs end (`ends`) and how long a waiting job runs (`durations`) are the caller's
assumptions; so is the market, which holds the snapshot's prices throughout.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from scheduler import (
    ACCEPT,
    FORBIDDEN,
    KIND_IDLE,
    KIND_PAYG,
    KIND_SPOT,
    SOURCE_PAYG,
    SOURCE_QUOTA,
    SOURCE_SPOT,
    PendingJob,
    PodRequest,
    RunningPod,
    Snapshot,
    plan,
)
from scheduler.plan import job_order, queue_of

from .engine import MAX_ROUNDS

# Planned per cycle, as the live cycle does: given the pending jobs, those a cycle would plan.
Window = Callable[[list[PendingJob]], list[PendingJob]]


@dataclass(frozen=True)
class Forecast:
    starts: dict[str, datetime | None]  # job id -> estimated first start; None: not within the horizon
    horizon_end: datetime
    cycles: int


def estimate_starts(snapshot: Snapshot, now: datetime, ends: Mapping[str, datetime],
                    durations: Mapping[str, timedelta], horizon: timedelta,
                    window: Window | None = None) -> Forecast:
    """When each job of `snapshot.jobs` would first start.

    ends: job id -> when each running job's pods are assumed to end (a job missing here does not
    end within the horizon); durations: job id -> how long each waiting job runs once started;
    window: which pending jobs a cycle plans (all of them when None)."""
    return _Forward(snapshot, now, ends, durations, now + horizon, window).run()


class _Forward:
    def __init__(self, snapshot, now, ends, durations, limit, window):
        self.snapshot, self.now, self.limit, self.window = snapshot, now, limit, window or list
        self.durations = dict(durations)
        self.instance_type = {n.name: n.instance_type for n in snapshot.nodes}
        self.pods: dict[str, list[RunningPod]] = {}
        for pod in snapshot.pods:
            if not pod.terminating:
                self.pods.setdefault(pod.job_id, []).append(pod)
        self.pending = {job.job_id: job for job in snapshot.jobs}
        self.starts: dict[str, datetime | None] = dict.fromkeys(self.pending)
        self.runs = dict.fromkeys(self.pods, 0)  # bumps on every preemption: stale ends are ignored
        self.ends: list[tuple[datetime, str, int]] = [(ends[j], j, 0) for j in self.pods if j in ends]
        heapq.heapify(self.ends)
        self.cycles = 0

    def run(self) -> Forecast:
        t = self.now
        while True:
            self._cycles(t)
            if all(s is not None for s in self.starts.values()) or not self.ends or self.ends[0][0] > self.limit:
                break
            t = self.ends[0][0]
            while self.ends and self.ends[0][0] == t:
                _, job_id, run = heapq.heappop(self.ends)
                if self.runs.get(job_id) == run:
                    self.pods.pop(job_id, None)
        return Forecast(self.starts, self.limit, self.cycles)

    def _cycles(self, t: datetime) -> None:
        for _ in range(MAX_ROUNDS):
            jobs = self.window(list(self.pending.values()))
            if not jobs:
                return
            left_out = len(jobs) < len(self.pending)
            pods = tuple(p for pods in self.pods.values() for p in pods)
            decisions = plan(replace(self.snapshot, pods=pods, jobs=tuple(jobs)), t)
            self.cycles += 1
            for admission in decisions.admissions:
                self._start(admission, t)
            for job_id in sorted({p.job_id for p in decisions.preemptions}):
                self._preempt(job_id, t)
            # As the live cycle does (ScheduleCycle.run_paced): the next cycle follows at once after a
            # preemption, or after admissions when the window left jobs out, which may fit too.
            if not decisions.preemptions and not (decisions.admissions and left_out):
                return

    def _start(self, admission, t: datetime) -> None:
        job = self.pending.pop(admission.job_id)
        requests = {(p.role, p.index): p for p in job.pods}
        self.pods[job.job_id] = [
            RunningPod(f"{job.job_id}.{pl.role}.{pl.index}", job.job_id, pl.node, requests[pl.role, pl.index].resources,
                       admission.kind, t, admission.quota_id, job.priority, pl.gpu_indices, bid=job.bid)
            for pl in admission.placements]
        if job.job_id in self.starts and self.starts[job.job_id] is None:
            self.starts[job.job_id] = t
        run = self.runs[job.job_id] = self.runs.get(job.job_id, -1) + 1
        heapq.heappush(self.ends, (t + self.durations[job.job_id], job.job_id, run))

    def _preempt(self, job_id: str, t: datetime) -> None:
        """Stop the whole gang and re-queue it as from now, with the work since its last
        checkpoint to do again: the rest of its run, and what it had done since then."""
        pods = self.pods.pop(job_id)
        end = next((e for e, j, r in self.ends if j == job_id and r == self.runs[job_id]), self.limit)
        self.durations[job_id] = end - pods[0].work_since()
        self.runs[job_id] += 1
        self.pending[job_id] = self._requeued(job_id, pods, t)

    def _requeued(self, job_id: str, pods: list[RunningPod], t: datetime) -> PendingJob:
        first = pods[0]
        source = {KIND_SPOT: SOURCE_SPOT, KIND_PAYG: SOURCE_PAYG}.get(first.kind, SOURCE_QUOTA)
        # A pool job asks for its pool's instance type; a quota pod may go to any node of its scope.
        requests = tuple(PodRequest("pod", i, p.resources,
                                    self.instance_type[p.node] if source != SOURCE_QUOTA else None)
                         for i, p in enumerate(pods))
        return PendingJob(job_id, t, requests, first.quota_id, oversold_type=ACCEPT if first.kind == KIND_IDLE
                          else FORBIDDEN, priority=first.priority, source=source, bid=first.bid)


def queue_window(depth: Callable[[int], int]) -> Window:
    """A window that plans, of each quota's queue, its first depth(number of queues) jobs in the
    queue's order, and every spot and pay-as-you-go job, as cycle/waiting.py does."""
    def window(jobs: list[PendingJob]) -> list[PendingJob]:
        queues: dict[str, list[PendingJob]] = {}
        out = []
        for job in jobs:
            if job.source == SOURCE_QUOTA:
                queues.setdefault(queue_of(job), []).append(job)
            else:
                out.append(job)
        n = depth(len(queues))
        for queued in queues.values():
            out += sorted(queued, key=job_order)[:n]
        return out
    return window
