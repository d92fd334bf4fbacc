"""The replay engine: an event-driven virtual clock around the real `scheduler.plan`.

The clock jumps from one event time to the next (an arrival or a completion); all events of
one time are applied first, then schedule cycles run at that time until nothing more changes:

  1. completions free their pods; arrivals join their queue;
  2. a cycle: the snapshot (nodes, quotas, running pods, candidate pending jobs) goes to plan();
     admitted jobs start and get a completion event at now + remaining work;
  3. preempted jobs stop at once (no grace period): the work since the last checkpoint (all of
     it without checkpoints) is lost and the job re-queues with its remaining work, and step 2
     repeats (plan() gives jobs In Quota their turn before any borrower, so the capacity a job
     reclaimed is its own next cycle).

The `elastic` policy (scheduler/elastic.py) replays every job of more than one GPU, not spot, as
an elastic data-parallel job of one-GPU workers, MinParallelism half of them (rounded up): it
starts once its minimum fits, takes more where they fit, is shrunk before any job is taken
whole, and grows into capacity no waiting job could use. Its work is GPU-seconds (duration x
GPUs) done at one per GPU held, which assumes perfect scaling; a resize restarts it at once from
its last checkpoint (the work since is lost), with no start-up time counted.

Cheap cycles. The snapshot's node and quota tuples are built once; the pods tuple is rebuilt only
when a pod came or went (or, with checkpoints, an idle pod's last checkpoint moved). plan() is
given only the pending jobs that could be admitted or reclaim capacity now (`_candidates`), and
no cycle runs when there are none. That filter never changes a decision: a job left out could
only have waited, and waiting takes nothing from the jobs after it (see `_capacity_for`).
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from market.bids import bid_price
from scheduler import (
    ACCEPT, FORBIDDEN, FORCE, KIND_GUARANTEED, KIND_IDLE, SOURCE_SPOT, ElasticJob,
    MarketState, PendingJob, PodRequest, RunningPod, Snapshot, plan,
)
from scheduler.reservation import TYPICAL_DAYS

from .cluster import INSTANCE_TYPE, build_nodes, build_quotas, gang, per_gpu_share, quota_id
from .trace import Trace, TraceJob



@dataclass(frozen=True, slots=True)
class Policy:
    """How a policy sets each job's Idle Resources mode (its OversoldType).

    Strict quotas are the baseline without any borrowing, so they hold every job to its
    guarantee, whatever mode the trace gives it; the borrow policies keep a mode the trace
    sets (its `oversold_type` column) and give the others AcceptQuotaOverSold. Were the
    trace's modes kept under strict too, a trace that sets every job's mode would replay the
    same under all three (spot jobs are spot under every policy: they never touch a quota).
    """

    mode: str
    keeps_trace_mode: bool


POLICIES = {"strict": Policy(FORBIDDEN, False), "borrow": Policy(ACCEPT, True),
            "borrow-ckpt": Policy(ACCEPT, True), "elastic": Policy(ACCEPT, True)}
CHECKPOINTED = ("borrow-ckpt", "elastic")  # the policies that need a checkpoint interval
ELASTIC = "elastic"
SPOT = "spot"
ON_DEMAND_PRICE = Decimal("1.00")  # per node-minute; only the spot/on-demand ratio matters
SPOT_PRICE_RATIO = Decimal("0.3")  # a flat spot market: bids at or above 30 % run
DEFAULT_EPOCH = datetime(2017, 1, 1, tzinfo=timezone.utc)
MAX_ROUNDS = 100  # cycles at one instant; more means the scheduler and this engine disagree


@dataclass(eq=False)
class JobRun:
    """One job's life in the replay (mutable; compared by identity)."""

    job: TraceJob
    mode: str  # an OversoldType, or SPOT
    request: PendingJob
    gpus_per_node: int
    remaining: int
    queued_since: int
    first_start: int | None = None
    end: int | None = None
    started: int | None = None  # start of the current run
    run: int = 0  # bumps on every preemption: stale completion events are ignored
    kind: str | None = None
    pods: list[RunningPod] = field(default_factory=list)
    checkpoint: int | None = None  # last checkpoint time of the current run
    preemptions: int = 0
    borrowed_runs: int = 0  # runs admitted Not in Quota (idle, preemptible)
    lost_gpu_s: int = 0
    waited: int = 0
    held: int = 0  # GPUs its pods hold now
    # Elastic (the elastic policy): its MinParallelism (0: a gang), the GPU-seconds of work
    # left, its pods' worker indices, and how often it was resized.
    min_workers: int = 0
    work: int = 0
    index_of: dict = field(default_factory=dict)
    shrinks: int = 0
    growths: int = 0

    @property
    def order(self) -> tuple:
        return (self.job.submit, self.job.job_id)


@dataclass
class Result:
    policy: str
    checkpoint_s: int | None
    total_gpus: int
    jobs: list[JobRun]
    skipped: dict[str, int]
    busy: list[tuple[int, int]]  # (time, GPUs in use) at every change
    cycles: int = 0
    plan_s: float = 0.0
    resize_lost_gpu_s: int = 0  # elastic: work lost to shrinks and growths (in lost_gpu_s too)
    wall_s: float = 0.0
    rounds_exceeded: int = 0
    backfill: bool = False


class Replay:
    def __init__(self, trace: Trace, policy: str, checkpoint_minutes: float | None = None,
                 public_nodes: int = 0, prefilter: bool = True, backfill: bool = False):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.policy, self.prefilter, self.backfill = policy, prefilter, backfill
        if backfill:
            # A queue's head is the first of its jobs that waits In Quota, and whether a job
            # waits there or borrows depends on what the other queues' heads hold: a pruned
            # snapshot was seen to give a queue another head than the whole one (and, with
            # elastic jobs, to let growth interact with it), so reservations replay whole.
            self.prefilter = False
        self.ckpt = round(checkpoint_minutes * 60) if checkpoint_minutes else None
        self.epoch = trace.start or DEFAULT_EPOCH
        self.nodes = build_nodes(trace.vcs, public_nodes)
        self.quotas = build_quotas(trace.vcs, backfill)
        self.typical = _TypicalRuns()
        self.vcs = {vc.name: vc for vc in trace.vcs}
        self.markets = (MarketState(INSTANCE_TYPE, ON_DEMAND_PRICE * SPOT_PRICE_RATIO,
                                    ON_DEMAND_PRICE * SPOT_PRICE_RATIO),) if public_nodes else ()
        self.vc_of = {n.name: (n.quota_id[3:] if n.quota_id else None) for n in self.nodes}
        self.guarantee = {v.name: v.nodes * v.gpus_per_node for v in trace.vcs}
        self.free_vc = dict(self.guarantee)
        self.used = dict.fromkeys(self.guarantee, 0)  # guaranteed GPUs in use per VC
        self.idle_on = dict.fromkeys(self.guarantee, 0)  # borrowed GPUs on each VC's nodes
        self.free_total = sum(self.guarantee.values())
        self.free_pub = sum(n.capacity.gpu for n in self.nodes if n.quota_id is None)
        self.total_gpus = sum(n.capacity.gpu for n in self.nodes)
        self.runs: dict[str, JobRun] = {}
        self.buckets: dict[tuple, list[JobRun]] = {}
        self.by_name = sorted(self.nodes, key=lambda n: n.name)
        self.free3 = {n.name: n.capacity.as_tuple() for n in self.nodes}
        self.node_pods: dict[str, dict[str, RunningPod]] = {n.name: {} for n in self.nodes}
        self.idle_gpus = {n.name: 0 for n in self.nodes}  # GPUs held by borrowers, per node
        self.capacity3 = dict(self.free3)
        self.vc_nodes: dict[str, list] = {vc: [] for vc in self.guarantee}  # a VC may own no node
        for node in self.by_name:
            if self.vc_of[node.name] is not None:
                self.vc_nodes.setdefault(self.vc_of[node.name], []).append(node)
        self._all_pods: tuple[RunningPod, ...] | None = ()
        self.idle_runs: dict[str, JobRun] = {}
        self.elastic_runs: dict[str, JobRun] = {}  # running elastic jobs
        self.completions: list[tuple[int, str, int]] = []
        self.busy = 0
        self.result = Result(policy, self.ckpt, self.total_gpus, [], {}, [(0, 0)],
                             backfill=backfill)
        self.arrivals = self._admit_trace(trace)

    # ---- the trace --------------------------------------------------------------------------

    def _admit_trace(self, trace: Trace) -> list[JobRun]:
        out = []
        for job in trace.jobs:
            why = self._skip_reason(job)
            if why:
                self.result.skipped[why] = self.result.skipped.get(why, 0) + 1
                continue
            out.append(self._job_run(job))
        if trace.invalid:
            self.result.skipped["invalid row"] = len(trace.invalid)
        return out

    def _mode(self, job: TraceJob) -> str:
        if job.spot_discount is not None:
            return SPOT
        policy = POLICIES[self.policy]
        return (job.oversold_type or policy.mode) if policy.keeps_trace_mode else policy.mode

    def _skip_reason(self, job: TraceJob) -> str | None:
        vc, mode = self.vcs.get(job.vc), self._mode(job)
        if mode == SPOT:
            if not self.free_pub:
                return "spot job without a public pool (--public-nodes)"
            return "larger than the public pool" if job.gpus > self.free_pub else None
        if vc is None:
            return "virtual cluster missing from the nodes file"
        if job.gpus > self.free_total:
            return "larger than the whole cluster"
        if mode == FORBIDDEN and job.gpus > self.guarantee[job.vc]:
            return "larger than its quota (ForbiddenQuotaOverSold)"
        return None

    def _job_run(self, job: TraceJob) -> JobRun:
        mode = self._mode(job)
        per_node = self.vcs[job.vc].gpus_per_node if job.vc in self.vcs else 8
        submitted = self.epoch + timedelta(seconds=job.submit)
        if mode == SPOT:
            request = PendingJob(job.job_id, submitted, gang(job.gpus, per_node), None,
                                 oversold_type=FORBIDDEN, priority=job.priority,
                                 source=SOURCE_SPOT,
                                 bid=bid_price(ON_DEMAND_PRICE, discount=job.spot_discount))
        elif self.policy == ELASTIC and job.gpus > 1:
            workers = tuple(PodRequest("worker", i, per_gpu_share(1, per_node), INSTANCE_TYPE)
                            for i in range(job.gpus))
            least = -(-job.gpus // 2)
            request = PendingJob(job.job_id, submitted, workers, quota_id(job.vc),
                                 oversold_type=mode, priority=job.priority, min_pods=least)
            return JobRun(job, mode, request, per_node, job.duration, job.submit,
                          min_workers=least, work=job.duration * job.gpus)
        else:
            request = PendingJob(job.job_id, submitted, gang(job.gpus, per_node),
                                 quota_id(job.vc), oversold_type=mode, priority=job.priority)
        return JobRun(job, mode, request, per_node, job.duration, job.submit)

    # ---- the clock --------------------------------------------------------------------------

    def run(self, on_progress=None) -> Result:
        started = time.perf_counter()
        arrivals, i = self.arrivals, 0
        while i < len(arrivals) or self.completions:
            t = min(arrivals[i].job.submit if i < len(arrivals) else float("inf"),
                    self.completions[0][0] if self.completions else float("inf"))
            while self.completions and self.completions[0][0] == t:
                self._complete(*heapq.heappop(self.completions))
            first = i
            while i < len(arrivals) and arrivals[i].job.submit == t:
                self._enqueue(arrivals[i], t)
                i += 1
            self._cycles(t)
            if self.busy != self.result.busy[-1][1]:
                self.result.busy.append((t, self.busy))
            if on_progress and i > first:
                on_progress(i - first)
        self.result.jobs = [r for r in self.runs.values()]
        self.result.wall_s = time.perf_counter() - started
        return self.result

    def _enqueue(self, run: JobRun, t: int) -> None:
        self.runs[run.job.job_id] = run
        run.queued_since = t
        bucket = self.buckets.setdefault(self._bucket_key(run), [])
        if not bucket or bucket[-1].order < run.order:
            bucket.append(run)
        else:  # a preempted job goes back to its place by submit time
            bisect.insort(bucket, run, key=lambda r: r.order)

    @staticmethod
    def _bucket_key(run: JobRun) -> tuple:
        spot = run.mode == SPOT
        return (None if spot else run.job.vc, run.mode, run.job.gpus, run.job.priority,
                run.request.bid if spot else None)

    # ---- cycles -----------------------------------------------------------------------------

    def _cycles(self, t: int) -> None:
        for _ in range(MAX_ROUNDS):
            jobs = self._candidates()
            if not jobs and not (self.free_total > 0 and self._growable()):
                return
            decisions = self._plan(jobs, t)
            self._apply(decisions, t)
            if not decisions.preemptions:
                return
        self.result.rounds_exceeded += 1

    def _plan(self, jobs: list[PendingJob], t: int):
        if self.ckpt:
            self._advance_checkpoints(t)
        nodes, pods = self._cluster_for(jobs) if self.prefilter else (self.nodes, self._pods())
        if self.backfill:
            self.quotas = self.typical.given(self.quotas, t)
        snapshot = Snapshot(nodes, self.quotas, pods, tuple(jobs), self.markets, self._growable())
        started = time.perf_counter()
        decisions = plan(snapshot, self.epoch + timedelta(seconds=t))
        self.result.plan_s += time.perf_counter() - started
        self.result.cycles += 1
        return decisions

    def _candidates(self) -> list[PendingJob]:
        out = []
        waiting: list[JobRun] = []
        for key, bucket in self.buckets.items():
            if bucket:
                need = bucket[0].min_workers or key[2]  # an elastic job starts at its minimum
                take = self._capacity_for(key[0], key[1], need, bid=key[4]) if self.prefilter else None
                out.extend(r.request for r in (bucket if take is None else bucket[:take]))
                if self.policy == ELASTIC and take is not None and take < len(bucket):
                    # Its first job left out waits in plan() too: while a job waits, no elastic
                    # job grows into capacity it might use (scheduler/elastic.py).
                    waiting.append(bucket[take])
        return out + [r.request for r in waiting]

    def _capacity_for(self, vc: str | None, mode: str, need: int, bid) -> int:
        """How many jobs of this shape could be admitted or reclaim capacity now (0 = none).

        In quota a job needs room in its guarantee, and either the free GPUs of its VC or
        borrowers there to reclaim; borrowing needs free GPUs in the lending scope (the whole
        cluster); spot needs free public GPUs and a bid at the market price. Jobs of one
        bucket are alike, so if one of them fails the ones queued behind it fail too, and at
        most room // need + free // need of them succeed: the rest are left out.
        """
        take = 0
        if mode in (FORBIDDEN, ACCEPT):
            room = self.guarantee[vc] - self.used[vc]
            if need <= room and (need <= self.free_vc[vc] or self.idle_on[vc]):
                take += room // need
        if mode in (ACCEPT, FORCE) and need <= self.free_total:
            take += self.free_total // need
        if mode == SPOT and self.markets and bid >= self.markets[0].price \
                and need <= self.free_pub:
            take += self.free_pub // need
        return take

    def _pods(self) -> tuple[RunningPod, ...]:
        if self._all_pods is None:
            self._all_pods = tuple(p for pods in self.node_pods.values() for p in pods.values())
        return self._all_pods

    def _cluster_for(self, jobs: list[PendingJob]):
        """The nodes (and their pods) that can matter to `jobs` this cycle.

        plan() indexes every node and pod it is given, so most of a cycle's cost grows with
        them; these are left out, none of which could change a decision:
        - a node of the job's own VC with no free GPU and only guaranteed pods of that VC: it
          adds as much to the quota's guarantee as to its usage, and holds no victim;
        - empty nodes of the own VC beyond the first as many as the cycle has pods, while
          the quota keeps more room than all its jobs here need: best fit picks the fewest
          GPUs left, then the node name, so no later one of equal free capacity could be
          picked, and the room checks all pass with or without them;
        - nodes of other VCs without free GPUs, nodes of other VCs for a cycle with only
          ForbiddenQuotaOverSold jobs, and of nodes with equal free capacity all but the first
          as many as the cycle has pods (best fit, as above);
        - the public pool unless the cycle has spot jobs; then all of it, since the
          pay-as-you-go reserve is a share of its nodes, busy or free.
        The root quota sees a smaller guarantee but never less room than its VCs: it never
        binds. tests/tracesim checks the replay is the same with and without this pruning.
        """
        need: dict[str, int] = {}
        wide = spot = False
        limit = sum(len(j.pods) for j in jobs)
        for grows in self._growable():  # growth looks for free capacity as admissions do
            need[grows.quota_id[3:]] = need.get(grows.quota_id[3:], 0) + len(grows.pods)
            wide = wide or grows.kind == KIND_IDLE
            limit += len(grows.pods)
        for j in jobs:
            if j.source == SOURCE_SPOT:
                spot = True
                continue
            vc = j.quota_id[3:]
            need[vc] = need.get(vc, 0) + self.runs[j.job_id].job.gpus
            wide = wide or j.oversold_type != FORBIDDEN
        nodes = []
        for vc, want in need.items():
            nodes += self._own_nodes(vc, want, limit)
        if wide or spot:
            seen: dict[tuple, int] = {}
            for node in self.by_name:
                free = self.free3[node.name]
                vc = self.vc_of[node.name]
                if vc is None and spot:  # the pay-as-you-go reserve counts the whole pool
                    nodes.append(node)
                    continue
                if free[0] <= 0 or vc in need or not wide or vc is None:
                    continue
                count = seen.get(free, 0)
                if count < limit:
                    seen[free] = count + 1
                    nodes.append(node)
        pods = tuple(p for n in nodes for p in self.node_pods[n.name].values())
        return tuple(nodes), pods

    def _own_nodes(self, vc: str, want: int, limit: int) -> list:
        spare = self.guarantee[vc] - self.used[vc] - want  # room left if all jobs got in
        per_node = self.vcs[vc].gpus_per_node
        out, empty = [], 0
        for node in self.vc_nodes[vc]:
            free = self.free3[node.name]
            if free == self.capacity3[node.name]:
                empty += 1
                if empty > limit and spare >= per_node:
                    spare -= per_node
                    continue
                out.append(node)
            elif free[0] > 0 or self.idle_gpus[node.name]:
                out.append(node)
        return out

    def _advance_checkpoints(self, t: int) -> None:
        """Idle pods report their last checkpoint: the scheduler prefers victims that lose
        the least work (docs/design.md rule 4)."""
        for run in self.idle_runs.values():
            done = (t - run.started) // self.ckpt * self.ckpt
            if done and run.started + done != run.checkpoint:
                run.checkpoint = run.started + done
                at = self.epoch + timedelta(seconds=run.checkpoint)
                run.pods = [_with_checkpoint(p, at) for p in run.pods]
                for pod in run.pods:
                    self.node_pods[pod.node][pod.pod_id] = pod
                self._all_pods = None

    # ---- applying decisions -----------------------------------------------------------------

    def _apply(self, decisions, t: int) -> None:
        for admission in decisions.admissions:
            self._start(self.runs[admission.job_id], admission, t)
        shrunk = {s.job_id for s in decisions.shrinks}
        taken: dict[str, set[str]] = {}
        for p in decisions.preemptions:
            taken.setdefault(p.job_id, set()).add(p.pod_id)
        for job_id in sorted(taken):
            if job_id in shrunk:
                self._shrink(self.runs[job_id], taken[job_id], t)
            else:
                self._preempt(self.runs[job_id], t)
        for growth in decisions.growths:
            self._grow(self.runs[growth.job_id], growth, t)

    def _start(self, run: JobRun, admission, t: int) -> None:
        bucket = self.buckets[self._bucket_key(run)]
        del bucket[bucket.index(run)]
        run.kind = admission.kind
        run.pods = []
        self._add_pods(run, admission.placements, t)
        if admission.kind == KIND_IDLE:
            self.idle_runs[run.job.job_id] = run
            run.borrowed_runs += 1
        if run.min_workers:
            self.elastic_runs[run.job.job_id] = run
        run.started, run.checkpoint = t, None
        run.waited += t - run.queued_since
        if run.first_start is None:
            run.first_start = t
        self._schedule_end(run, t)

    def _add_pods(self, run: JobRun, placements, t: int) -> None:
        requests = {(p.role, p.index): p for p in run.request.pods}
        now = self.epoch + timedelta(seconds=t)
        added = [RunningPod(f"{run.job.job_id}.{run.run}.{pl.index}", run.job.job_id,
                            pl.node, requests[(pl.role, pl.index)].resources, run.kind,
                            now, quota_id(run.job.vc) if run.kind in (KIND_GUARANTEED, KIND_IDLE)
                            else None, run.job.priority, pl.gpu_indices,
                            spare=bool(run.min_workers) and pl.index >= run.min_workers)
                 for pl in placements]
        for pod, pl in zip(added, placements):
            self._hold(pod, -pod.resources.gpu)
            run.index_of[pod.pod_id] = pl.index
        gpus = sum(p.resources.gpu for p in added)
        if run.kind == KIND_GUARANTEED:
            self.used[run.job.vc] += gpus
        run.pods += added
        run.held += gpus

    def _schedule_end(self, run: JobRun, t: int) -> None:
        left = -(-run.work // run.held) if run.min_workers else run.remaining
        heapq.heappush(self.completions, (t + left, run.job.job_id, run.run))

    # ---- elastic jobs -------------------------------------------------------------------------

    def _growable(self) -> tuple[ElasticJob, ...]:
        """Running elastic jobs below their maximum, as the live snapshot lists them."""
        if self.policy != ELASTIC:
            return ()
        out = []
        for run in self.elastic_runs.values():
            if len(run.pods) < len(run.request.pods):
                have = set(run.index_of.values())
                more = tuple(p for p in run.request.pods if p.index not in have)
                out.append(ElasticJob(run.job.job_id, quota_id(run.job.vc), run.kind,
                                      len(run.pods), more, run.job.priority))
        return tuple(out)

    def _bank(self, run: JobRun, t: int) -> None:
        """A resize: keep the work up to the last checkpoint, lose the rest; a new run begins."""
        ran = t - run.started
        saved = ran // self.ckpt * self.ckpt
        run.work -= saved * run.held
        lost = (ran - saved) * run.held
        run.lost_gpu_s += lost
        self.result.resize_lost_gpu_s += lost
        run.started, run.checkpoint = t, None
        run.run += 1  # its completion event moves
        # Its pods restart: their work since now, as the victim order counts it.
        now = self.epoch + timedelta(seconds=t)
        run.pods = [replace(p, started_at=now, last_checkpoint_at=None) for p in run.pods]
        for pod in run.pods:
            self.node_pods[pod.node][pod.pod_id] = pod
        self._all_pods = None

    def _shrink(self, run: JobRun, pod_ids: set[str], t: int) -> None:
        self._bank(run, t)
        gone = [p for p in run.pods if p.pod_id in pod_ids]
        for pod in gone:
            self._hold(pod, pod.resources.gpu)
            del run.index_of[pod.pod_id]
        gpus = sum(p.resources.gpu for p in gone)
        if run.kind == KIND_GUARANTEED:
            self.used[run.job.vc] -= gpus
        run.held -= gpus
        run.pods = [p for p in run.pods if p.pod_id not in pod_ids]
        run.shrinks += 1
        self._schedule_end(run, t)

    def _grow(self, run: JobRun, growth, t: int) -> None:
        self._bank(run, t)
        self._add_pods(run, growth.placements, t)
        run.growths += 1
        self._schedule_end(run, t)

    def _hold(self, pod: RunningPod, delta: int) -> None:
        """Move `-delta` GPUs of `pod`'s node from free to used (delta < 0) or back."""
        sign = 1 if delta > 0 else -1
        self.free3[pod.node] = tuple(f + sign * r for f, r in
                                     zip(self.free3[pod.node], pod.resources.as_tuple()))
        vc = self.vc_of[pod.node]
        if vc is None:
            self.free_pub += delta
        else:
            self.free_vc[vc] += delta
            self.free_total += delta
            if pod.kind == KIND_IDLE:
                self.idle_on[vc] -= delta
                self.idle_gpus[pod.node] -= delta
        self.busy -= delta
        if delta > 0:
            del self.node_pods[pod.node][pod.pod_id]
        else:
            self.node_pods[pod.node][pod.pod_id] = pod
        self._all_pods = None

    def _stop(self, run: JobRun) -> None:
        for pod in run.pods:
            self._hold(pod, pod.resources.gpu)
        if run.kind == KIND_GUARANTEED:
            self.used[run.job.vc] -= run.held
        self.idle_runs.pop(run.job.job_id, None)
        self.elastic_runs.pop(run.job.job_id, None)
        run.pods, run.kind, run.held = [], None, 0
        run.index_of.clear()

    def _complete(self, at: int, job_id: str, run_no: int) -> None:
        run = self.runs[job_id]
        if run.run != run_no or run.end is not None:
            return  # the run this event belonged to was preempted
        if self.backfill:
            self.typical.finished(run.job.vc, at, at - run.started)
        self._stop(run)
        run.end, run.remaining, run.work = at, 0, 0

    def _preempt(self, run: JobRun, t: int) -> None:
        """Stop the whole gang; keep the work up to the last checkpoint, lose the rest."""
        ran = t - run.started
        saved = ran // self.ckpt * self.ckpt if self.ckpt else 0
        if run.min_workers:
            run.work -= saved * run.held
        run.remaining = run.remaining - saved if self.ckpt else run.job.duration
        run.lost_gpu_s += (ran - saved) * run.held
        run.preemptions += 1
        run.run += 1
        self._stop(run)
        self._enqueue(run, t)


class _TypicalRuns:
    """Each VC's typical run as the live snapshot computes a quota's (scheduler.reservation.
    typical_run: the median_low of the runs finished in the last TYPICAL_DAYS), in virtual time
    and kept as it goes, since every cycle reads it: the replay knows each job's true duration,
    but the scheduler may only know what has finished."""

    WINDOW = TYPICAL_DAYS * 86400

    def __init__(self):
        self.sorted: dict[str, list[int]] = {}
        self.recent: dict[str, deque] = {}
        self.changed = False

    def finished(self, vc: str, at: int, run: int) -> None:
        bisect.insort(self.sorted.setdefault(vc, []), run)
        self.recent.setdefault(vc, deque()).append((at, run))
        self.changed = True

    def given(self, quotas: tuple, t: int) -> tuple:
        """`quotas` with each VC's typical run at time t."""
        for vc, recent in self.recent.items():
            while recent and recent[0][0] < t - self.WINDOW:
                runs = self.sorted[vc]
                del runs[bisect.bisect_left(runs, recent.popleft()[1])]
                self.changed = True
        if not self.changed:
            return quotas
        self.changed = False
        return tuple(replace(q, typical_run=self._median(q.id[len("vc-"):]))
                     if q.parent_id else q for q in quotas)

    def _median(self, vc: str) -> timedelta | None:
        runs = self.sorted.get(vc)
        return timedelta(seconds=runs[(len(runs) - 1) // 2]) if runs else None


def _with_checkpoint(pod: RunningPod, at: datetime) -> RunningPod:
    return replace(pod, last_checkpoint_at=at)


def replay(trace: Trace, policy: str, checkpoint_minutes: float | None = None,
           public_nodes: int = 0, prefilter: bool = True, on_progress=None,
           backfill: bool = False) -> Result:
    """Replay `trace` under `policy`; 'borrow-ckpt' needs `checkpoint_minutes`; `backfill`: every
    VC's queue gives its head a reservation (scheduler/reservation.py)."""
    if policy in CHECKPOINTED and not checkpoint_minutes:
        raise ValueError(f"policy {policy} needs a checkpoint interval in minutes")
    ckpt = checkpoint_minutes if policy in CHECKPOINTED else None
    return Replay(trace, policy, ckpt, public_nodes, prefilter, backfill).run(on_progress)
