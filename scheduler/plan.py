"""One schedule cycle: a Snapshot in, Decisions out. Pure and deterministic.

Public API (all importable from `scheduler`):

    plan(snapshot: Snapshot, now: datetime) -> Decisions

    Snapshot(nodes, quotas, pods, jobs, markets)      frozen; see scheduler/model.py
      Node(name, instance_type, capacity: Resources, quota_id=None, ready=True, gpu_ids=None)
      Quota(id, tenant, parent_id=None, resource_type='ECS'|'Lingjun',
            queue_strategy='StrictFIFO'|'BestEffort', allow_priority_preemption=False,
            min_runtime_s=0, backfill=False, typical_run: timedelta|None, weight=Decimal(1))
      RunningPod(pod_id, job_id, node, resources, kind='guaranteed'|'idle'|'spot'|'payg',
                 started_at, quota_id, priority, gpu_indices, last_checkpoint_at,
                 terminating, bid, protection_until, expected_end: datetime|None,
                 spare: bool — an elastic job's worker above its minimum)
      PendingJob(job_id, submitted_at, pods: tuple[PodRequest], quota_id, workspace,
                 oversold_type, priority 1-9, source='quota'|'spot'|'payg', bid: Decimal|None,
                 max_run: timedelta|None, min_pods: int — elastic: the first min_pods
                 pods are the gang, the rest start where they fit; 0: all are the gang)
      ElasticJob(job_id, quota_id, kind, workers, pods: tuple[PodRequest])  a running elastic
                 job below its maximum and the pods it may add (Snapshot.elastic)
      PodRequest(role, index, resources, instance_type=None)
      MarketState(instance_type, price, avg_price_1h, resource_type)

    Decisions
      admissions:  Admission(job_id, kind, quota_id, use_oversold, placements:
                   tuple[PodPlacement(role, index, node, gpu_indices)])
                   use_oversold True = "Not in Quota" (idle, preemptible), False = "In Quota".
      preemptions: Preemption(pod_id, job_id, node, reason: PreemptionReason(code, message,
                   by_job, by_quota, price, bid)); code reclaimed | higher_priority | outbid |
                   stock_short. Spot releases are preemptions too (outbid / stock_short).
      waiting:     WaitReason(job_id, status 'Queuing'|'Bidding', code, message, queue,
                   position, waiting_for_pods, reserved_from, reserved_nodes) for every
                   pending job not admitted; a reserved head names its reservation.

      Codes are constants in scheduler.decisions (QUOTA_FULL, PARENT_QUOTA_FULL,
      QUOTA_NODES_BUSY, NO_IDLE_CAPACITY, GANG_DOES_NOT_FIT, NEVER_FITS,
      WAITING_FOR_TERMINATION, HELD_BEHIND_HEAD, BID_BELOW_PRICE, NO_STOCK, UNKNOWN_QUOTA).
      growths:     Growth(job_id, kind, quota_id, placements, workers_from, workers_to):
                   a running elastic job takes more pods (scheduler/elastic.py).
      shrinks:     Shrink(job_id, workers_from, workers_to, message): the job's preempted pods
                   were all above its minimum; it keeps running with the rest.

      Decisions.admission(job_id) / wait_reason(job_id) look one job up.

The integrator applies the decisions in one transaction: bind admitted pods to their nodes and
GPU indices (kind 'guaranteed'/'idle'/'spot'/'payg' becomes the pod's kind in later snapshots;
set protection_until for spot), mark preempted pods terminating (they must stay in the next
snapshots with terminating=True until they are gone, or the cycle would preempt again), and
store each waiting job's reason and position. A growth binds its pods as an admission does; a
growth or a shrink restarts the job's remaining pods at the new world size, not as a failure.
Nothing is kept across cycles: a job that
waits for terminating pods competes for them next cycle, but In Quota placement comes before
any idle placement (step 5), so no borrower takes capacity a lender's job can use then. Within
a cycle such a job holds the capacity it waits for and, when it fits its guarantee, books that
too, as an admission would: no later job of its queue takes the guarantee meanwhile.

The cycle, in numbered steps (see Cycle.run):
  1. Index the snapshot: quota tree and usage, free capacity per node, scopes.
  2. Release spot pods whose bid fell below the release price (rule 7).
  3. Pay-as-you-go jobs take public inventory first, releasing spot pods for stock if needed.
  4. Spot jobs take what is left of their pool when the bid is at or above the market price
     and the pool keeps its pay-as-you-go reserve of free nodes (scheduler/spot.py).
  5. Quota jobs, the heads of all quota queues in one fair order (jobs that do not borrow
     first, then priority, then submit time), in two passes: first In Quota only (admitted,
     or reclaims capacity and waits for its victims, or waits with a reason), then Not in
     Quota for the jobs that may borrow. A blocked head holds the rest of a StrictFIFO queue;
     BestEffort queues backfill past it: freely, or, where the quota has `backfill`, behind a
     reservation for the head that no later In Quota job delays (scheduler/reservation.py;
     what it holds is free to borrowers in pass 2, whom the head reclaims when its time
     comes). Pass 2 takes the borrowing quotas furthest below their weighted share of idle
     capacity first (scheduler/fair_share.py).
  5b. Running elastic jobs below their maximum grow into free capacity of their scope that no
     waiting job could use (scheduler/elastic.py).
  6. Number the waiting jobs of each queue and return the decisions, sorted.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterable
from datetime import datetime, timedelta
from itertools import islice

from . import elastic, reservation
from .capacity import CapacityView, Scope
from .decisions import (
    BID_BELOW_PRICE, BIDDING, HELD_BEHIND_HEAD, HIGHER_PRIORITY, NEVER_FITS, NO_STOCK, QUEUING,
    QUOTA_NODES_BUSY, RECLAIMED, STOCK_SHORT, UNKNOWN_QUOTA, WAITING_FOR_TERMINATION, Admission,
    Decisions, Growth, PodPlacement, Preemption, PreemptionReason, WaitReason,
)
from .explain import lent_out, no_room, no_stock, quota_full
from .fair_share import Shares
from .model import (
    FORBIDDEN, FORCE, KIND_GUARANTEED, KIND_IDLE, KIND_PAYG, KIND_SPOT, SOURCE_PAYG, SOURCE_SPOT,
    STRICT_FIFO, PendingJob, Quota, RunningPod, Snapshot,
)
from .placement import FailedShapes, gang_fits, place_gang
from .preemption import Candidates, find_victims, reclaim_order, stock_order
from .quota_tree import QuotaTree
from .resources import total
from .spot import bid_problem, outbid_releases, releasable, reserve_closed


def _whole_free(state) -> bool:
    """Nothing holds any of the node: an instance of its type can start on it."""
    cap = state.node.capacity
    return state.free == [cap.gpu, cap.cpu_m, cap.mem_mib]


# Outcomes of a job's turn in pass 1 of step 5.
ADMITTED, WAITS, LATER = "admitted", "waits", "later"


def plan(snapshot: Snapshot, now: datetime) -> Decisions:
    # A cycle allocates a great many short-lived objects while it holds the whole snapshot, and
    # the collector's full passes over them made a cycle's time grow faster than its work. What
    # it leaves behind is collected after it returns.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return Cycle(snapshot, now).run()
    finally:
        if collecting:
            gc.enable()


def job_order(job: PendingJob) -> tuple:
    """Order within a queue (rule 6): priority, then submit time, then job id."""
    return (-job.priority, job.submitted_at, job.job_id)


def spot_order(job: PendingJob) -> tuple:
    """Order of a spot queue: the highest bid first, then as job_order."""
    return (-(job.bid or 0), -job.priority, job.submitted_at, job.job_id)


def queue_of(job: PendingJob) -> str:
    if job.source in (SOURCE_SPOT, SOURCE_PAYG):
        return f"{job.source}:{pool_type(job)}"
    return f"quota:{job.quota_id or ''}"


def pool_type(job: PendingJob) -> str:
    types = {p.instance_type or "*" for p in job.pods}
    return types.pop() if len(types) == 1 else "*"


class Cycle:
    def __init__(self, snapshot: Snapshot, now: datetime):
        # Step 1: index the snapshot.
        self.now = now
        self.tree = QuotaTree(snapshot.quotas, snapshot.nodes)
        self.tree.count_running(snapshot.pods)
        self.view = CapacityView(snapshot.nodes, snapshot.pods)
        self.pods = snapshot.pods
        self.markets = {m.instance_type: m for m in snapshot.markets}
        self.public = [n for n in snapshot.nodes if n.quota_id is None]
        # Elastic jobs are planned as their gang of MinParallelism pods (scheduler/elastic.py).
        self.elastic_full = {j.job_id: j for j in snapshot.jobs if j.min_pods}
        self.queues = self._build_queues(elastic.gang(j) for j in snapshot.jobs)
        self.elastic = snapshot.elastic
        self.growths: list[Growth] = []
        self.spare_pods = any(p.spare for p in snapshot.pods)
        self.spare_candidates: dict[Candidates, Candidates] = {}
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.waiting: dict[str, tuple] = {}  # job id -> (code, message, waiting_for)
        self.failed = FailedShapes()
        self.reason_cache: dict[tuple, tuple[str, str]] = {}
        self.explained: dict[tuple, tuple[str, str]] = {}  # see _explain_quota_wait
        self.reclaim_candidates: dict[tuple, Candidates] = {}
        self.quota_scopes: dict[str, tuple[Scope, Scope]] = {}
        self.stock_candidates: Candidates | None = None
        self.own_tried: set[str] = set()  # Acceptable jobs that did not fit In Quota in pass 1
        self.outcomes: dict[tuple, tuple] = {}  # see _like_an_earlier_job
        # queue -> the reservation of its head, None when its head needs none (see _reserve)
        self.reservations: dict[str, reservation.Reservation | None] = {}
        self.reserved: dict[str, tuple] = {}  # job id -> (time, nodes) of its reservation
        self.held_nodes: set[str] = set()  # reserved nodes: no later job preempts a pod there
        self.released = False  # pass 2 has begun: what reservations held is free to borrowers
        self.shares = Shares(snapshot.pods)  # borrowed capacity per quota (fair_share.py)

    def _build_queues(self, jobs) -> dict[str, list[PendingJob]]:
        queues: dict[str, list[PendingJob]] = {}
        for job in jobs:
            queues.setdefault(queue_of(job), []).append(job)
        for name, items in queues.items():
            items.sort(key=spot_order if name.startswith("spot:") else job_order)
        return dict(sorted(queues.items()))

    def run(self) -> Decisions:
        self._release_outbid()                                   # step 2
        for name in self._queue_names("payg:"):                  # step 3
            for job in self.queues[name]:
                self._attempt_payg(job)
        for name in self._queue_names("spot:"):                  # step 4
            for job in self.queues[name]:
                self._attempt_spot(job)
        self._schedule_quota_queues()                            # step 5
        self._grow_elastic()                                     # step 5b
        return self._decisions()                                 # step 6

    def _queue_names(self, prefix: str) -> list[str]:
        return [name for name in self.queues if name.startswith(prefix)]

    # ---- step 2 and pool helpers -------------------------------------------------------

    def _release_outbid(self) -> None:
        itype = {n.name: n.instance_type for n in self.public}
        for pod, reason in outbid_releases(self.pods, self.markets, itype, self.now):
            if pod.node in self.view.states:
                self._preempt(pod, reason)

    def _pool_scope(self, job: PendingJob) -> tuple[Scope, str]:
        itype = pool_type(job)
        scope = self.view.scopes.get(("pool", itype)) or self.view.scope(
            ("pool", itype), [n for n in self.public if itype in ("*", n.instance_type)])
        return scope, itype

    # ---- step 3 and 4: the public pool ---------------------------------------------------

    def _attempt_payg(self, job: PendingJob) -> None:
        scope, itype = self._pool_scope(job)
        if self._try_admit(job, scope, KIND_PAYG):
            return
        if self._wait_for_capacity(job, scope, self._stock_candidates(), self._stock_reason):
            return
        code, msg = self._cached_reason(job, scope, "stock",
                                        lambda: no_stock(self.view, scope, job, job.need,
                                                         itype))
        self._wait(job, code, msg)

    def _attempt_spot(self, job: PendingJob) -> None:
        problem = bid_problem(job, self.markets)
        if problem is not None:
            kind, msg = problem
            self._wait(job, BID_BELOW_PRICE if kind == "bid" else NO_STOCK, msg)
            return
        scope, itype = self._pool_scope(job)
        placed = self._place(job, scope)
        if placed is None:
            code, msg = self._cached_reason(
                job, scope, "stock", lambda: no_stock(self.view, scope, job, job.need,
                                                      itype))
            self._wait(job, code, msg)
            return
        closed = self._reserve_closed(scope, placed)
        if closed is not None:
            self._wait(job, NO_STOCK, closed)
            return
        self._admit(job, placed, KIND_SPOT)

    def _reserve_closed(self, scope: Scope, placed) -> str | None:
        """Why the placement would leave less than the pay-as-you-go reserve of a pool it takes
        nodes of (rule 7: pay-as-you-go takes inventory first), or None."""
        taken: dict[str, set[str]] = {}
        for _, name in placed:
            state = self.view.states[name]
            names = taken.setdefault(state.node.instance_type, set())
            if _whole_free(state):
                names.add(name)
        for itype, names in sorted(taken.items()):
            pool = scope.names_for(itype)
            key = ("free nodes", scope.key, itype, scope.version)
            free = self.view.memo.get(key)
            if free is None:
                free = self.view.memo[key] = sum(_whole_free(self.view.states[n]) for n in pool)
            closed = reserve_closed(itype, len(pool), free, len(names))
            if closed is not None:
                return closed
        return None

    def _stock_candidates(self) -> Candidates:
        if self.stock_candidates is None:
            self.stock_candidates = Candidates(self.view, lambda p: releasable(p, self.now),
                                               lambda p: stock_order(p, self.now))
        return self.stock_candidates

    def _stock_reason(self, pod: RunningPod, job: PendingJob) -> PreemptionReason:
        msg = (f"Stock short: pay-as-you-go job {job.job_id} needs the inventory of "
               f"{self.view.states[pod.node].node.instance_type}")
        return PreemptionReason(STOCK_SHORT, msg, by_job=job.job_id, bid=pod.bid)

    # ---- step 5: quota queues ------------------------------------------------------------

    def _schedule_quota_queues(self) -> None:
        """Step 5 in two passes, so that idle placement never takes capacity that a guaranteed
        job could have this cycle (rules 1, 3 and 4).

        Pass 1 offers every queue's jobs In Quota placement only: Forbidden jobs get their
        whole turn (own nodes, else reclaim, else a wait reason); Acceptable jobs take their
        own free capacity, or (under priority preemption) their quota's lower-priority pods, or
        are left for pass 2 if idle capacity fits them now, or else get their whole turn
        (rule 3: reclaim only when neither fits); Only-Idle jobs are left for
        pass 2. Pass 2 offers the jobs left over idle placement (an Acceptable one that lost
        its idle fit to a job ahead of it reclaims on its own nodes, rule 4). Both passes take
        the queue heads in one fair order (`_head_key`).

        Without pass 1 a lender whose victims are gone could lose the freed node to an idle
        job of another quota ordered earlier, and reclaim it again next cycle, without end.

        StrictFIFO: a job not admitted in pass 1 stops its queue there. If it waits for good
        (Forbidden), the rest wait behind it; else the rest of the queue goes to pass 2 behind
        it, and each of them gets its whole turn once the jobs ahead are admitted.
        """
        names = self._queue_names("quota:")
        later = self._guaranteed_pass({n: self.queues[n] for n in names})
        self._release_reservations()
        self._in_fair_order(later, self._idle_turn, self._borrow_key)
        for held in self.reservations.values():
            if held is not None:
                self._say_reserved(held)

    def _in_fair_order(self, queues: dict[str, list[PendingJob]], turn, key=None) -> None:
        """Give each job of `queues` its turn, the heads of all queues in one fair order
        (`key`, _head_key by default).

        turn(job, rest) is True to go on with the queue, False to stop it (`rest` iterates the
        jobs behind `job`, which the turn has dealt with). A turn changes only its own queue's
        key (its quota's borrowed share), so the keys of the other heads stay true.
        """
        key = key or self._head_key
        pos = dict.fromkeys(queues, 0)
        heap = [(key(jobs[0]), name) for name, jobs in queues.items() if jobs]
        heapq.heapify(heap)
        while heap:
            _, name = heapq.heappop(heap)
            jobs = queues[name]
            job = jobs[pos[name]]
            pos[name] += 1
            # Read only by a turn that stops its queue: a copy of the rest at every turn made a
            # deep queue cost the square of its length.
            if turn(job, islice(jobs, pos[name], None)) and pos[name] < len(jobs):
                heapq.heappush(heap, (key(jobs[pos[name]]), name))

    def _guaranteed_pass(self, queues: dict[str, list[PendingJob]]) -> dict[str, list]:
        """Pass 1; returns the jobs left for pass 2, per queue, in queue order."""
        later: dict[str, list[PendingJob]] = {}

        def turn(job: PendingJob, rest: Iterable[PendingJob]) -> bool:
            outcome = self._like_an_earlier_job("in quota", job, self._attempt_in_quota)
            if outcome == WAITS:
                self._reserve(job)
            if outcome == LATER:
                later.setdefault(queue_of(job), []).append(job)
            if outcome == ADMITTED or not self._strict(job):
                return True
            if outcome == WAITS:
                self._hold_behind(job, rest)
            else:  # held behind `job` until pass 2 admits it
                later[queue_of(job)].extend(rest)
            return False

        self._in_fair_order(queues, turn)
        return later

    def _idle_turn(self, job: PendingJob, rest: Iterable[PendingJob]) -> bool:
        """Pass 2: the job's idle placement, or its whole turn if pass 1 never reached it."""
        tried = job.job_id in self.own_tried
        if self._like_an_earlier_job(("idle", tried), job,
                                     lambda j: self._attempt_quota_job(j, own_tried=tried)):
            return True
        if self._strict(job):
            self._hold_behind(job, rest)
            return False
        return True

    # ---- reservations (scheduler/reservation.py) ---------------------------------------------

    def _reserve(self, job: PendingJob) -> None:
        """The first job of a backfill queue that waits in pass 1 is its head: unless it waits for
        terminating pods (it holds that capacity already) or can never fit its quota's nodes, it
        gets the earliest fit on them, and their free capacity it will need is held."""
        name = queue_of(job)
        quota = self.tree.quotas.get(job.quota_id or "")
        if name in self.reservations or quota is None or not quota.backfill:
            return
        self.reservations[name] = None
        if job.oversold_type == FORCE or self.waiting[job.job_id][0] in (
                WAITING_FOR_TERMINATION, NEVER_FITS):
            return
        own, _ = self._quota_scopes(quota)
        found = reservation.find(self.view, own, job, self.tree.quotas, self.now)
        if found is None:
            return
        at, placed, freed = found
        held = {node: self.view.block(node, amounts)
                for node, amounts in reservation.to_hold(self.view, placed, freed).items()}
        nodes = tuple(sorted({node for _, node in placed}))
        self.held_nodes.update(nodes)
        self.reclaim_candidates.clear()  # built before these nodes were off limits
        self.reservations[name] = reservation.Reservation(job, name, at, nodes, held,
                                                          len(self.admissions))

    def _release_reservations(self) -> None:
        """After pass 1, what each reservation held goes first to the jobs behind its head that
        are expected to end before it (they delay nothing), then back to everyone: pass 2 only
        borrows, and a borrower on a reserved node is the head's to reclaim once the rest of the
        node is free (preemption victims on those nodes stay the head's alone meanwhile)."""
        self.released = True
        for held in self.reservations.values():
            if held is not None:
                for node, kept in held.held.items():
                    self.view.unblock(node, kept)
                self._backfill_short_jobs(held)
        if any(self.reservations.values()):
            self.failed = FailedShapes()  # free capacity grew: what failed may fit now

    def _backfill_short_jobs(self, held: reservation.Reservation) -> None:
        """In Quota, on the quota's own nodes; not in a StrictFIFO queue, which holds them."""
        quota = self.tree.quotas[held.job.quota_id]
        if quota.queue_strategy == STRICT_FIFO:
            return
        own, _ = self._quota_scopes(quota)
        jobs = self.queues[held.queue]
        for job in jobs[jobs.index(held.job) + 1:]:
            wait = self.waiting.get(job.job_id)
            if (wait is None or wait[0] == WAITING_FOR_TERMINATION or job.oversold_type == FORCE
                    or not reservation.ends_before(job, held.at, self.now)
                    or self.tree.short_quota(quota.id, job.need) is not None):
                continue
            placed = place_gang(self.view, own, job.pods)
            if placed is not None:
                del self.waiting[job.job_id]
                self._admit(job, placed, KIND_GUARANTEED)

    def _say_reserved(self, held: reservation.Reservation) -> None:
        backfilled = sum(1 for a in self.admissions[held.admitted_before:]
                         if a.quota_id == held.job.quota_id and a.kind == KIND_GUARANTEED)
        code, message, waiting_for = self.waiting[held.job.job_id]
        text = reservation.describe(held, backfilled, self.now)
        self.waiting[held.job.job_id] = (code, f"{text}. Now: {message}", waiting_for)
        self.reserved[held.job.job_id] = (held.at, held.nodes)
        gpus = sum(r[0] + f[0] for r, f, _ in held.held.values())
        if not gpus:
            return
        jobs = self.queues[held.queue]
        more = f"; {gpus} GPU held for job {held.job.job_id}'s reservation"
        for job in jobs[jobs.index(held.job) + 1:]:
            found = self.waiting.get(job.job_id)
            if found is not None and found[0] != HELD_BEHIND_HEAD:
                self.waiting[job.job_id] = (found[0], found[1] + more, found[2])

    @staticmethod
    def _head_key(job: PendingJob) -> tuple:
        """Fair order across queues, Kueue style: jobs that only borrow go after the others,
        then job_order."""
        return (job.oversold_type == FORCE,) + job_order(job)

    def _borrow_key(self, job: PendingJob) -> tuple:
        """Pass 2, where jobs borrow: as _head_key, but the quota furthest below its weighted
        share of idle capacity first (fair_share.py)."""
        return (job.oversold_type == FORCE, self._share(job.quota_id)) + job_order(job)

    def _share(self, qid: str | None, at_start: bool = False):
        quota = self.tree.quotas.get(qid or "")
        if quota is None:
            return 0
        _, idle = self._quota_scopes(quota)
        return self.shares.share(quota.id, idle.capacity, quota.weight, at_start)

    def _strict(self, job: PendingJob) -> bool:
        quota = self.tree.quotas.get(job.quota_id or "")
        return quota is not None and quota.queue_strategy == STRICT_FIFO

    def _hold_behind(self, head: PendingJob, rest: Iterable[PendingJob]) -> None:
        why = self.waiting[head.job_id][1]
        for job in rest:
            self._wait(job, HELD_BEHIND_HEAD,
                       f"Held behind job {head.job_id}, the head of the StrictFIFO queue of "
                       f"quota {head.quota_id}, which waits: {why}")

    def _like_an_earlier_job(self, tag, job: PendingJob, attempt):
        """attempt(job), or the outcome an earlier job of the same quota, shape, borrowing
        setting and priority had in this pass, when nothing its turn reads has changed since:
        the quota's own and lending scopes (each node's free, releasing and running pods) and
        the quota usage, all versioned.

        A cycle with thousands of waiting jobs of a few shapes tried each one, only for most
        to fail the same way (bench/kueue_baseline.py). A turn that admitted, preempted or
        reserved nothing moved no version, so the next such job would fail the same way: it
        gets the same outcome and wait reason (which _explain_quota_wait shares already).
        """
        quota = self.tree.quotas.get(job.quota_id or "")
        if quota is None:
            return attempt(job)
        own, idle = self._quota_scopes(quota)
        versions = (own.version, idle.version, self.tree.version)
        key = (tag, quota.id, job.shape, job.oversold_type, job.priority) + versions
        found = self.outcomes.get(key)
        if found is not None:
            outcome, tried, wait = found
            if tried:
                self.own_tried.add(job.job_id)
            if wait is not None:
                self.waiting[job.job_id] = wait
            return outcome
        tried_before, wait_before = job.job_id in self.own_tried, self.waiting.get(job.job_id)
        outcome = attempt(job)
        if (own.version, idle.version, self.tree.version) == versions:
            wait = self.waiting.get(job.job_id)
            self.outcomes[key] = (outcome, job.job_id in self.own_tried and not tried_before,
                                  None if wait is wait_before else wait)
        return outcome

    def _attempt_in_quota(self, job: PendingJob) -> str:
        """Pass 1: ADMITTED, WAITS (its turn is over) or LATER (its turn goes on in pass 2).

        An Acceptable job that fits neither its own capacity (free, or free once terminating
        pods are gone) nor idle capacity now would not fit idle in pass 2 either (free
        capacity only shrinks), so it takes its whole turn here: its reclaim comes before any
        idle job's placement, as rule 3 orders it.
        """
        quota = self.tree.quotas.get(job.quota_id or "")
        if quota is None or job.oversold_type == FORBIDDEN:
            return ADMITTED if self._attempt_quota_job(job) else WAITS
        if job.oversold_type == FORCE:
            return LATER
        own, idle = self._quota_scopes(quota)
        room = self.tree.short_quota(quota.id, job.need) is None
        if room and self._try_admit(job, own, KIND_GUARANTEED):
            return ADMITTED
        self.own_tried.add(job.job_id)
        # Its own capacity is being freed (usually by its own reclaim): wait for it rather
        # than borrow, or an idle job ahead in pass 2 could take the rest from under it.
        if room and self._wait_in_own(job, own, room):
            return WAITS
        # Under priority preemption it takes its quota's own lower-priority pods before it
        # borrows: left for pass 2, its quota's free capacity went to those lower-priority jobs in
        # this pass, and when pass 2 found no idle fit after all it preempted them, cycle after
        # cycle (the preemption storms of bench/kueue_baseline.py: thousands of restarts).
        if quota.allow_priority_preemption and self._wait_in_own(
                job, own, room, self._reclaim_candidates(job, quota, borrowers=False),
                self._reclaim_reason(quota), ("own", job.priority)):
            return WAITS
        if self._fits(job, idle):
            return LATER
        # Its idle try in there fails at once (remembered by _fits): no idle placement in pass 1.
        return ADMITTED if self._attempt_quota_job(job, own_tried=True) else WAITS

    def _attempt_quota_job(self, job: PendingJob, own_tried: bool = False) -> bool:
        """A job's turn: own free capacity, idle capacity, reclaim, or a reason to wait.
        own_tried: pass 1 has already tried its own free capacity (nothing freed since)."""
        quota = self.tree.quotas.get(job.quota_id or "")
        if quota is None:
            self._wait(job, UNKNOWN_QUOTA, f"Quota {job.quota_id!r} does not exist")
            return False
        own, idle = self._quota_scopes(quota)
        if self.released and self.held_nodes:
            own = self._unreserved(quota, own)
        in_quota, borrow = job.oversold_type != FORCE, job.oversold_type != FORBIDDEN
        # With the guarantee used up, reclaiming idle pods cannot help: only preempting the
        # quota's own lower-priority pods could.
        room = self.tree.short_quota(quota.id, job.need) is None
        if in_quota and room and not own_tried and self._try_admit(job, own, KIND_GUARANTEED):
            return True
        if borrow and self._try_admit(job, idle, KIND_IDLE):
            return True
        prio = job.priority if quota.allow_priority_preemption else 0
        if in_quota and (room or prio) and self._wait_in_own(
                job, own, room, self._reclaim_candidates(job, quota), self._reclaim_reason(quota),
                ("reclaim", prio)):
            return False
        self._explain_quota_wait(job, quota, own, idle, in_quota, borrow)
        return False

    def _quota_scopes(self, quota: Quota) -> tuple[Scope, Scope]:
        """The quota's own nodes (rule 1) and its lending scope (rule 2), built once."""
        found = self.quota_scopes.get(quota.id)
        if found is None:
            own = self.view.scope(("quota", quota.id), self.tree.nodes_of.get(quota.id, []))
            key = ("idle",) + self.tree.idle_scope_key(quota.id)
            idle = self.view.scopes.get(key) or self.view.scope(
                key, self.tree.idle_scope_nodes(key[1:]))
            found = self.quota_scopes[quota.id] = (own, idle)
        return found

    def _unreserved(self, quota: Quota, own: Scope) -> Scope:
        """The quota's own nodes but the reserved ones, for In Quota turns in pass 2: a job of a
        StrictFIFO queue held behind a borrowing head gets its whole turn there, after what
        reservations held went back to borrowers, and must not delay another queue's head."""
        key = ("quota", quota.id, "unreserved")
        found = self.view.scopes.get(key)
        if found is None:
            found = self.view.scope(key, [self.view.states[n].node for n in own.names
                                          if n not in self.held_nodes])
        return found

    def _reclaim_candidates(self, job: PendingJob, quota: Quota,
                            borrowers: bool = True) -> Candidates:
        """Shared by all jobs of the quota (of one priority, under priority preemption);
        borrowers=False: the quota's own lower-priority pods only."""
        key = (quota.id, job.priority if quota.allow_priority_preemption else 0, borrowers)
        found = self.reclaim_candidates.get(key)
        if found is None:
            found = self.reclaim_candidates[key] = Candidates(
                self.view, lambda p: (p.node not in self.held_nodes
                                      and self._may_preempt(p, job, quota, borrowers)),
                elastic.spare_first(
                    lambda p: reclaim_order(p, quota.id, self.now, self.view.job_gpus[p.job_id],
                                            self._share(p.quota_id, at_start=True))))
        return found

    def _may_preempt(self, pod: RunningPod, job: PendingJob, quota: Quota,
                     borrowers: bool = True) -> bool:
        """Idle pods past their quota's minimum runtime (unless not `borrowers`); with priority
        preemption also the quota's own lower-priority guaranteed pods. Never anything else."""
        if pod.kind == KIND_IDLE:
            if not borrowers:
                return False
            owner = self.tree.quotas.get(pod.quota_id or "")
            min_runtime = timedelta(seconds=owner.min_runtime_s if owner else 0)
            return self.now - pod.started_at >= min_runtime
        return (quota.allow_priority_preemption and pod.kind == KIND_GUARANTEED
                and pod.quota_id == quota.id and pod.priority < job.priority)

    def _reclaim_reason(self, quota: Quota):
        def reason(pod: RunningPod, job: PendingJob) -> PreemptionReason:
            if pod.kind == KIND_IDLE:
                msg = f"Reclaimed by quota {quota.id} for job {job.job_id}"
                return PreemptionReason(RECLAIMED, msg, by_job=job.job_id, by_quota=quota.id)
            msg = (f"Preempted by higher priority job {job.job_id} (priority {job.priority} > "
                   f"{pod.priority}) in quota {quota.id}")
            return PreemptionReason(HIGHER_PRIORITY, msg, by_job=job.job_id, by_quota=quota.id)
        return reason

    def _explain_quota_wait(self, job, quota, own, idle, in_quota, borrow) -> None:
        # Jobs of one shape in one quota wait for the same reason until a node of either scope
        # or the quota usage changes; a cycle with thousands of waiting jobs has few of them.
        key = (quota.id, job.shape, in_quota, borrow, own.version, idle.version,
               self.tree.version)
        found = self.explained.get(key)
        if found is None:
            found = self.explained[key] = self._quota_wait_reason(job, quota, own, idle,
                                                                  in_quota, borrow)
        self._wait(job, *found)

    def _quota_wait_reason(self, job, quota, own, idle, in_quota, borrow) -> tuple[str, str]:
        need = job.need
        parts = []
        if in_quota:
            parts.append(quota_full(self.tree, quota.id, need) or self._cached_reason(
                job, own, "own", lambda: self._own_room(job, own, quota, need)))
        if borrow:
            where = self.tree.describe_scope(idle.key[1:])
            parts.append(self._cached_reason(
                job, idle, "idle", lambda: no_room(self.view, idle, job, need, where)))
        code = parts[0][0]
        message = "; ".join(("In quota: " + m) if i == 0 and len(parts) > 1 else
                            ("Not in quota: " + m) if len(parts) > 1 else m
                            for i, (_, m) in enumerate(parts))
        return code, message

    def _own_room(self, job, own, quota, need) -> tuple[str, str]:
        code, msg = no_room(self.view, own, job, need, f"the nodes of quota {quota.id}",
                            QUOTA_NODES_BUSY, "Not enough free capacity on")
        lent = lent_out(self.view, own)
        if lent.gpu or lent.cpu_m:
            msg += f"; idle jobs hold {lent.describe()} of them"
        return code, msg

    # ---- admitting, waiting, preempting ----------------------------------------------------

    def _try_admit(self, job: PendingJob, scope: Scope, kind: str) -> bool:
        """Admit the job on free capacity of `scope`, if it fits."""
        placed = self._place(job, scope)
        if placed is not None:
            self._admit(job, self._widen(job, scope, kind, placed), kind)
        return placed is not None

    def _fits(self, job: PendingJob, scope: Scope) -> bool:
        """Whether _try_admit would admit the job now (without choosing its nodes)."""
        key = (scope.key, "free")
        if self.failed.known(key, job.shape):
            return False
        if gang_fits(self.view, scope, job.pods):
            return True
        self.failed.add(key, job.shape)
        return False

    def _place(self, job: PendingJob, scope: Scope):
        """Nodes for the job on free capacity of `scope`, or None. Free capacity only shrinks
        during a cycle, so a shape that failed in a scope fails again: remember it and skip."""
        key = (scope.key, "free")
        if self.failed.known(key, job.shape):
            return None
        need, free = job.need, scope.free
        placed = None
        if need.gpu <= free[0] and need.cpu_m <= free[1] and need.mem_mib <= free[2]:
            placed = place_gang(self.view, scope, job.pods)
        if placed is None:
            self.failed.add(key, job.shape)
        return placed

    def _admit(self, job: PendingJob, placed, kind: str) -> None:
        placements = self._book(job.quota_id, placed, kind,
                                job.need if len(placed) == len(job.pods) else None)
        quota_id = job.quota_id if kind in (KIND_GUARANTEED, KIND_IDLE) else None
        self.admissions.append(Admission(job.job_id, kind, quota_id, kind == KIND_IDLE,
                                         placements))

    def _book(self, quota_id, placed, kind: str, need=None) -> tuple[PodPlacement, ...]:
        """Take the placed pods' capacity (and their quota usage or borrowed share)."""
        placements = tuple(PodPlacement(req.role, req.index, node,
                                        self.view.admit(node, req.resources))
                           for req, node in sorted(placed, key=lambda rn: (rn[0].role,
                                                                            rn[0].index)))
        need = need if need is not None else total(req.resources for req, _ in placed)
        if kind == KIND_GUARANTEED:
            self.tree.add_usage(quota_id, need)
        elif kind == KIND_IDLE:
            self.shares.add(quota_id, need)
        return placements

    # ---- elastic jobs (scheduler/elastic.py) ------------------------------------------------

    def _widen(self, job: PendingJob, scope: Scope, kind: str, placed):
        """An elastic job admitted on its gang also takes as many of its other pods as fit."""
        full = self.elastic_full.get(job.job_id)
        if full is None:
            return placed
        wider = elastic.widest(self.view, scope, job.pods, full.pods[len(job.pods):],
                               self._quota_allows(job.quota_id, kind, job.need))
        return wider or placed

    def _quota_allows(self, quota_id, kind: str, base):
        """In Quota pods grow only within the quota's guarantee (rule 1)."""
        if kind != KIND_GUARANTEED:
            return lambda reqs: True
        return lambda reqs: self.tree.short_quota(
            quota_id, base + total(r.resources for r in reqs)) is None

    def _grow_elastic(self) -> None:
        """Step 5b: running elastic jobs below their maximum take free capacity of their scope
        that no waiting job could use."""
        if not self.elastic:
            return
        quota_of = {j.job_id: j.quota_id for name, jobs in self.queues.items()
                    if name.startswith("quota:") for j in jobs}
        wanted = elastic.wanted_scopes(self.waiting, lambda job_id: self._scopes_of(
            quota_of.get(job_id)))
        for job in elastic.growth_order(self.elastic):
            quota = self.tree.quotas.get(job.quota_id)
            if quota is None:
                continue
            own, idle = self._quota_scopes(quota)
            scope = own if job.kind == KIND_GUARANTEED else idle
            if scope.key in wanted:
                continue
            placed = elastic.widest(self.view, scope, (), job.pods,
                                    self._quota_allows(job.quota_id, job.kind, total(())))
            if placed:
                self.growths.append(Growth(job.job_id, job.kind, job.quota_id,
                                           self._book(job.quota_id, placed, job.kind),
                                           job.workers, job.workers + len(placed)))

    def _scopes_of(self, quota_id: str | None) -> tuple:
        quota = self.tree.quotas.get(quota_id or "")
        return self._quota_scopes(quota) if quota is not None else ()

    def _wait_in_own(self, job: PendingJob, own: Scope, room: bool, *victim_search) -> bool:
        """_wait_for_capacity on the quota's own nodes. A job that fits its guarantee (`room`)
        also books its usage for the rest of the cycle, as an admission would: else a later job
        of a BestEffort queue could take the guarantee those nodes are being freed for, and the
        job would wait again next cycle, its quota full, while a borrower took the freed nodes."""
        if not self._wait_for_capacity(job, own, *victim_search):
            return False
        if room:
            self.tree.hold(job.quota_id, job.need)
        return True

    def _wait_for_capacity(self, job, scope, candidates=None, reason=None,
                           prio: tuple[str, int] = ("reclaim", 0)) -> bool:
        """Reserve capacity that terminating pods will free; if that is not enough (and
        `candidates` are given), preempt the fewest victims that make the job fit. Either way
        the job waits this cycle, and while its victims terminate the next cycle finds them
        here and preempts nothing more. `prio` keys the failed-search memo: which candidates
        ("reclaim", or the quota's "own" pods only) and the priority that chose them.
        """
        shape = job.shape
        # A victim search that failed stays failed: a preemption since then only moved
        # capacity from candidates to releasing. A releasing-only fit may appear, though. A
        # job of lower priority has a subset of the candidates, so it fails too (its rank).
        victims_key, rank = (scope.key, "victims", prio[0]), prio[1]
        if candidates is not None and self.failed.known(victims_key, shape, rank):
            return False
        combined_key = (scope.key, "combined", scope.released)
        placed = None
        if not self.failed.known(combined_key, shape):
            placed = place_gang(self.view, scope, job.pods, combined=True)
            if placed is None:
                self.failed.add(combined_key, shape)
        if placed is None and candidates is not None:
            placed = self._preempt_for(job, scope, candidates, reason, victims_key, rank)
        if placed is None:
            return False
        waiting_for = self._terminating_needed(placed)
        for req, node in placed:
            self.view.reserve(node, req.resources)
        self._wait(job, WAITING_FOR_TERMINATION,
                   f"Waiting for {waiting_for} preempted or stopping pod(s) to terminate",
                   waiting_for)
        return True

    def _preempt_for(self, job, scope, candidates, reason, key, rank):
        victims = None
        if self.spare_pods:  # shrink elastic jobs before taking any job whole
            spare = self.spare_candidates.get(candidates)
            if spare is None:
                spare = self.spare_candidates[candidates] = elastic.spare_only(candidates)
            victims = find_victims(self.view, scope, job.pods, spare)
        if not victims:
            victims = find_victims(self.view, scope, job.pods, candidates)
        if not victims:
            self.failed.add(key, job.shape, rank)
            return None
        for pod in victims:
            self._preempt(pod, reason(pod, job))
        return place_gang(self.view, scope, job.pods, combined=True)

    def _terminating_needed(self, placed) -> int:
        """Terminating pods on the nodes where the job needs more than the free capacity."""
        per_node: dict[str, list[int]] = {}
        for req, node in placed:
            acc = per_node.setdefault(node, [0, 0, 0])
            for i, amount in enumerate(req.resources.as_tuple()):
                acc[i] += amount
        count = 0
        for node, need in sorted(per_node.items()):
            state = self.view.states[node]
            if any(need[i] > state.free[i] for i in range(3)):
                count += len(state.terminating)
        return count

    def _preempt(self, pod: RunningPod, reason: PreemptionReason) -> None:
        self.view.release(pod)
        self.preemptions.append(Preemption(pod.pod_id, pod.job_id, pod.node, reason))

    def _cached_reason(self, job, scope: Scope, tag: str, compute) -> tuple[str, str]:
        key = (scope.key, job.shape, tag, scope.version, job.quota_id)
        found = self.reason_cache.get(key)
        if found is None:
            found = self.reason_cache[key] = compute()
        return found

    def _wait(self, job: PendingJob, code: str, message: str, waiting_for: int = 0) -> None:
        self.waiting[job.job_id] = (code, message, waiting_for)

    # ---- step 6 ----------------------------------------------------------------------------

    def _decisions(self) -> Decisions:
        waiting = []
        for name, jobs in self.queues.items():
            position = 0
            for job in jobs:
                found = self.waiting.get(job.job_id)
                if found is not None:
                    position += 1
                    code, message, waiting_for = found
                    status = BIDDING if job.source == SOURCE_SPOT else QUEUING
                    waiting.append(WaitReason(job.job_id, status, code, message, name,
                                              position, waiting_for,
                                              *self.reserved.get(job.job_id, (None, ()))))
        preemptions, shrinks = (elastic.shrinks(self.pods, self.preemptions) if self.spare_pods
                                else (self.preemptions, []))
        return Decisions(
            admissions=tuple(sorted(self.admissions, key=lambda a: a.job_id)),
            preemptions=tuple(sorted(preemptions, key=lambda p: p.pod_id)),
            waiting=tuple(waiting),
            growths=tuple(sorted(self.growths, key=lambda g: g.job_id)),
            shrinks=tuple(shrinks),
        )
