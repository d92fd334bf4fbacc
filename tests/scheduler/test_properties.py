"""Invariants of plan() over random snapshots (DESIGN: property tests)."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import (
    ACCEPT, FORBIDDEN, FORCE, LINGJUN, Decisions, MarketState, Node, PendingJob, PodRequest, Quota,
    Resources, RunningPod, Snapshot, plan,
)
from scheduler.capacity import CapacityView
from scheduler.decisions import (
    HIGHER_PRIORITY, OUTBID, RECLAIMED, STOCK_SHORT, WAITING_FOR_TERMINATION,
)
from scheduler.placement import gang_fits, place_gang
from scheduler.plan import Cycle
from scheduler.quota_tree import QuotaTree
from scheduler.reservation import ends_before, gone_at
from scheduler.spot import reserve

from .builders import NOW

TYPES = ("A", "B")
SETTINGS = settings(max_examples=400, deadline=None)


def res(gpus: int) -> Resources:
    return Resources(gpus, 4000 * gpus + 1000, 16384 * gpus + 1024)


@st.composite
def snapshots(draw):
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    quotas = _quotas(rng)
    nodes = _nodes(rng, quotas)
    pods = _pods(rng, nodes, quotas)
    jobs = _jobs(rng, quotas)
    markets = tuple(MarketState(t, Decimal(rng.randint(1, 9)) / 10,
                                Decimal(rng.randint(1, 9)) / 10,
                                rng.choice(("ECS", LINGJUN))) for t in TYPES)
    return Snapshot(nodes, quotas, pods, jobs, markets)


def _quotas(rng):
    out = []
    for r in range(rng.randint(1, 3)):
        kind = rng.choice(("ECS", "ECS", LINGJUN))
        root = f"r{r}"
        ids = [root] + [f"{root}c{c}" for c in range(rng.randint(0, 2))]
        for qid in ids:
            out.append(Quota(qid, rng.choice(("t1", "t2")), None if qid == root else root, kind,
                             rng.choice(("StrictFIFO", "BestEffort")), rng.random() < 0.4,
                             rng.choice((0, 0, 600)), backfill=rng.random() < 0.5,
                             typical_run=rng.choice((None, _minutes(rng)))))
    return tuple(out)


def _minutes(rng):
    return timedelta(minutes=rng.choice((1, 10, 30, 90, 240)))


def _nodes(rng, quotas):
    return tuple(Node(f"n{i}", rng.choice(TYPES), res(rng.choice((2, 4, 8))),
                      rng.choice([q.id for q in quotas] + [None]), rng.random() < 0.9)
                 for i in range(rng.randint(1, 7)))


def _pods(rng, nodes, quotas):
    """Running pods that fit their nodes, as a consistent cluster would have them."""
    tree = QuotaTree(quotas, nodes)
    out = []
    for node in nodes:
        free, room = list(node.gpu_indices()), node.capacity
        for k in range(rng.randint(0, 3)):
            gpus = rng.randint(0, len(free))
            pod = _pod(rng, f"{node.name}p{k}", node, gpus, tuple(free[:gpus]), tree, quotas)
            if pod.resources.fits(room):
                out.append(pod)
                free, room = free[gpus:], room - pod.resources
    return tuple(out)


def _pod(rng, pod_id, node, gpus, ids, tree, quotas):
    started = NOW - timedelta(minutes=rng.randint(1, 120))
    common = dict(pod_id=pod_id, job_id=f"run-{pod_id}", node=node.name,
                  resources=res(gpus) if gpus else Resources(0, 500, 512),
                  started_at=started, priority=rng.randint(1, 9), gpu_indices=ids,
                  terminating=rng.random() < 0.15,
                  last_checkpoint_at=started + timedelta(minutes=1) if rng.random() < 0.5
                  else None, expected_end=rng.choice((None, started + _minutes(rng))))
    if node.quota_id is None:
        kind = rng.choice(("spot", "payg"))
        protect = NOW + timedelta(minutes=30) if rng.random() < 0.3 else None
        return RunningPod(kind=kind, bid=Decimal(rng.randint(1, 9)) / 10 if kind == "spot"
                          else None, protection_until=protect if kind == "spot" else None,
                          **common)
    if rng.random() < 0.5:  # a guaranteed pod of the node's quota or an ancestor
        return RunningPod(kind="guaranteed", quota_id=rng.choice(tree.chain(node.quota_id)),
                          **common)
    return RunningPod(kind="idle", quota_id=rng.choice(quotas).id, **common)


def _jobs(rng, quotas):
    out = []
    for j in range(rng.randint(0, 8)):
        source = rng.choice(("quota", "quota", "quota", "spot", "payg"))
        itype = rng.choice(TYPES) if source != "quota" or rng.random() < 0.3 else None
        pods = tuple(PodRequest(rng.choice(("worker", "ps")), i, res(rng.choice((0, 1, 2, 4, 8))),
                                itype) for i in range(rng.randint(1, 3)))
        out.append(PendingJob(
            f"j{j}", NOW - timedelta(minutes=rng.randint(0, 60)), pods,
            rng.choice([q.id for q in quotas]) if source == "quota" else None,
            oversold_type=rng.choice((FORBIDDEN, ACCEPT, FORCE)), priority=rng.randint(1, 9),
            source=source, bid=Decimal(rng.randint(1, 9)) / 10 if source == "spot" else None))
    # PodRequest (role, index) must be unique within a job.
    return tuple(PendingJob(j.job_id, j.submitted_at,
                            tuple(PodRequest(f"r{i}", i, p.resources, p.instance_type)
                                  for i, p in enumerate(j.pods)),
                            j.quota_id, "", j.oversold_type, j.priority, j.source, j.bid,
                            rng.choice((None, _minutes(rng))))
                 for j in out)


def used_after(snap, d):
    """Capacity held per node once the decisions apply (preempted pods still terminate)."""
    used = defaultdict(lambda: Resources())
    gpu_ids = defaultdict(list)
    for pod in snap.pods:
        used[pod.node] = used[pod.node] + pod.resources
        gpu_ids[pod.node] += pod.gpu_indices
    jobs = {j.job_id: j for j in snap.jobs}
    for a in d.admissions:
        req = {(p.role, p.index): p for p in jobs[a.job_id].pods}
        for pl in a.placements:
            used[pl.node] = used[pl.node] + req[(pl.role, pl.index)].resources
            gpu_ids[pl.node] += pl.gpu_indices
    return used, gpu_ids


@SETTINGS
@given(snapshots())
def test_no_node_is_over_allocated_and_no_gpu_is_assigned_twice(snap):
    used, gpu_ids = used_after(snap, plan(snap, NOW))
    for n in snap.nodes:
        assert used[n.name].fits(n.capacity)
        assert len(gpu_ids[n.name]) == len(set(gpu_ids[n.name]))
        assert set(gpu_ids[n.name]) <= set(n.gpu_indices())


@SETTINGS
@given(snapshots())
def test_every_admitted_job_is_whole_and_fits_its_nodes(snap):
    d = plan(snap, NOW)
    nodes = {n.name: n for n in snap.nodes}
    tree = QuotaTree(snap.quotas, snap.nodes)
    jobs = {j.job_id: j for j in snap.jobs}
    for a in d.admissions:
        job = jobs[a.job_id]
        assert sorted((p.role, p.index) for p in a.placements) == \
            sorted((p.role, p.index) for p in job.pods)
        req = {(p.role, p.index): p for p in job.pods}
        for pl in a.placements:
            node, r = nodes[pl.node], req[(pl.role, pl.index)]
            assert node.ready and r.resources.fits(node.capacity)
            assert len(pl.gpu_indices) == r.resources.gpu
            assert r.instance_type in (None, node.instance_type)
            _assert_in_scope(a, node, tree)


def _assert_in_scope(a, node, tree):
    if a.kind in ("spot", "payg"):
        assert node.quota_id is None
    elif a.kind == "guaranteed":
        assert tree.in_subtree(node.quota_id, a.quota_id)
    else:
        key = tree.idle_scope_key(a.quota_id)
        assert node.name in {n.name for n in tree.idle_scope_nodes(key)}


@SETTINGS
@given(snapshots())
def test_no_quota_exceeds_its_guarantee(snap):
    d = plan(snap, NOW)
    tree = QuotaTree(snap.quotas, snap.nodes)
    tree.count_running(snap.pods)
    jobs = {j.job_id: j for j in snap.jobs}
    for a in d.admissions:
        if a.kind == "guaranteed":
            tree.add_usage(a.quota_id, sum((p.resources for p in jobs[a.job_id].pods),
                                           Resources()))
    for qid in tree.quotas:
        assert tree.usage[qid].fits(tree.guarantee[qid])


@SETTINGS
@given(snapshots())
def test_preemptions_follow_the_rules(snap):
    d = plan(snap, NOW)
    pods = {p.pod_id: p for p in snap.pods}
    jobs = {j.job_id: j for j in snap.jobs}
    quotas = {q.id: q for q in snap.quotas}
    for pre in d.preemptions:
        pod, reason = pods[pre.pod_id], pre.reason
        assert not pod.terminating
        if reason.code == RECLAIMED:  # only idle pods; Acceptable-in-quota pods are guaranteed
            assert pod.kind == "idle"
            assert jobs[reason.by_job].oversold_type != FORCE
        elif reason.code == HIGHER_PRIORITY:  # never for an idle job, never across quotas
            job = jobs[reason.by_job]
            assert pod.kind == "guaranteed" and job.oversold_type != FORCE
            assert pod.quota_id == job.quota_id and quotas[job.quota_id].allow_priority_preemption
            assert pod.priority < job.priority
        else:
            assert reason.code in (OUTBID, STOCK_SHORT) and pod.kind == "spot"
            assert pod.protection_until is None or pod.protection_until <= NOW


@SETTINGS
@given(snapshots())
def test_spot_never_takes_the_pay_as_you_go_reserve(snap):
    """Once the decisions apply, a pool that a spot admission took a whole node of still has
    its reserve of whole free Ready nodes (rule 7: pay-as-you-go takes inventory first)."""
    d = plan(snap, NOW)
    used, _ = used_after(snap, d)
    nodes = {n.name: n for n in snap.nodes}
    before, _ = used_after(snap, Decisions())
    took = {nodes[pl.node].instance_type for a in d.admissions if a.kind == "spot"
            for pl in a.placements if before[pl.node] == Resources()}
    for itype in took:
        pool = [n for n in snap.nodes if n.quota_id is None and n.ready and n.instance_type == itype]
        free = sum(used[n.name] == Resources() for n in pool)
        assert free >= reserve(len(pool))


@SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_plan_is_deterministic_whatever_the_input_order(snap, rnd):
    first = plan(snap, NOW)
    assert plan(snap, NOW) == first
    shuffled = Snapshot(*(tuple(rnd.sample(items, len(items))) for items in
                          (snap.nodes, snap.quotas, snap.pods, snap.jobs, snap.markets)))
    assert plan(shuffled, NOW) == first


@SETTINGS
@given(snapshots())
def test_every_pending_job_is_admitted_or_told_why_it_waits(snap):
    d = plan(snap, NOW)
    admitted = [a.job_id for a in d.admissions]
    waiting = [w.job_id for w in d.waiting]
    assert sorted(admitted + waiting) == sorted(j.job_id for j in snap.jobs)
    assert all(w.message and w.position >= 1 for w in d.waiting)


@st.composite
def crowded_trees(draw):
    """One ECS tree whose nodes are full of borrowers, with jobs of every OversoldType queued:
    the snapshots where reclaims and borrowing compete (rare in `snapshots`)."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    leaves = [f"c{c}" for c in range(rng.randint(2, 3))]
    quotas = (Quota("r", "t1"),) + tuple(
        Quota(q, "t1", "r", queue_strategy=rng.choice(("StrictFIFO", "BestEffort")),
              allow_priority_preemption=rng.random() < 0.3) for q in leaves)
    nodes = tuple(Node(f"n{i}", "A", res(8), rng.choice(leaves)) for i in range(rng.randint(2, 4)))
    pods = []
    for node in nodes:
        free, room = list(node.gpu_indices()), node.capacity
        while free and rng.random() < 0.8:
            gpus = rng.choice([g for g in (1, 2, 4, 8) if g <= len(free)])
            if not res(gpus).fits(room):
                break
            idle = rng.random() < 0.7
            pods.append(RunningPod(
                f"{node.name}p{len(pods)}", f"run{len(pods)}", node.name, res(gpus),
                "idle" if idle else "guaranteed", NOW - timedelta(minutes=rng.randint(1, 99)),
                rng.choice(leaves) if idle else node.quota_id, rng.randint(1, 3),
                tuple(free[:gpus]), terminating=rng.random() < 0.1))
            free, room = free[gpus:], room - res(gpus)
    jobs = tuple(PendingJob(
        f"j{j}", NOW - timedelta(minutes=rng.randint(0, 60)),
        tuple(PodRequest("w", i, res(rng.choice((1, 2, 4, 8)))) for i in range(rng.randint(1, 2))),
        rng.choice(leaves), oversold_type=rng.choice((FORBIDDEN, ACCEPT, ACCEPT, FORCE)),
        priority=rng.randint(1, 3)) for j in range(rng.randint(1, 8)))
    return Snapshot(nodes, quotas, tuple(pods), jobs)


def next_cycle(snap, d):
    """The next cycle's snapshot once every victim is gone: admitted jobs run, the rest wait."""
    gone = set(d.preempted_pod_ids())
    jobs = {j.job_id: j for j in snap.jobs}
    pods = [p for p in snap.pods if p.pod_id not in gone]
    for a in d.admissions:
        job = jobs[a.job_id]
        req = {(p.role, p.index): p.resources for p in job.pods}
        pods += [RunningPod(f"{a.job_id}/{pl.role}{pl.index}", a.job_id, pl.node,
                            req[(pl.role, pl.index)], a.kind, NOW, a.quota_id, job.priority,
                            pl.gpu_indices, bid=job.bid if a.kind == "spot" else None)
                 for pl in a.placements]
    admitted = {a.job_id for a in d.admissions}
    return Snapshot(snap.nodes, snap.quotas, tuple(pods),
                    tuple(j for j in snap.jobs if j.job_id not in admitted), snap.markets)


@SETTINGS
@given(st.one_of(snapshots(), crowded_trees()))
def test_a_lender_gets_what_it_reclaimed_before_any_idle_job(snap):
    """After a reclaim, the next cycle (victims gone) admits the lender's job, or another
    guaranteed job takes the quota's capacity first (admitted on its nodes, or booking it while
    it waits for pods to terminate); else no idle job gets onto the nodes the victims freed."""
    d = plan(snap, NOW)
    victims = defaultdict(set)  # reclaiming job -> nodes of its victims
    for pre in d.preemptions:
        if pre.reason.code == RECLAIMED:
            victims[pre.reason.by_job].add(pre.node)
    if not victims:
        return
    after = plan(next_cycle(snap, d), NOW)
    on = defaultdict(set)  # admission kind -> nodes it placed pods on
    for a in after.admissions:
        on[a.kind].update(pl.node for pl in a.placements)
    tree = QuotaTree(snap.quotas, snap.nodes)
    jobs = {j.job_id: j for j in snap.jobs}
    booked = {jobs[w.job_id].quota_id for w in after.waiting if w.code == WAITING_FOR_TERMINATION}
    for job_id, nodes in victims.items():
        lender, wait = after.admission(job_id), after.wait_reason(job_id)
        # Admitted: In Quota, or (Acceptable, rule 3) idle while its own capacity still
        # terminates; or it still waits for other pods to terminate.
        if lender is not None or wait.code == WAITING_FOR_TERMINATION:
            continue
        # Else a higher-ranked guaranteed job took the quota's capacity first, or no idle job
        # got onto the freed nodes.
        own = {n.name for n in tree.nodes_of[jobs[job_id].quota_id]}
        assert on["guaranteed"] & own or jobs[job_id].quota_id in booked or not on["idle"] & nodes, (job_id, wait)


@SETTINGS
@given(st.one_of(snapshots(), crowded_trees()))
def test_the_quick_gang_check_agrees_with_placing_the_gang(snap):
    view = CapacityView(snap.nodes, snap.pods)
    scope = view.scope(("all",), list(snap.nodes))
    for job in snap.jobs:
        for pods in (job.pods, job.pods[:1] * 3):  # as drawn, and a gang of alike pods
            assert gang_fits(view, scope, pods) == (place_gang(view, scope, pods) is not None)


@st.composite
def many_alike(draw):
    """A snapshot whose waiting jobs come in a few kinds with several jobs of each, as a long
    queue does: the turns of later jobs can reuse earlier ones' outcomes."""
    snap = draw(snapshots())
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    jobs = snap.jobs + tuple(
        replace(j, job_id=f"{j.job_id}-{k}", submitted_at=j.submitted_at + timedelta(seconds=k),
                priority=rng.choice((j.priority, rng.randint(1, 9))),
                oversold_type=rng.choice((j.oversold_type, FORBIDDEN, ACCEPT, FORCE)))
        for k in range(rng.randint(1, 5)) for j in snap.jobs)
    return replace(snap, jobs=jobs)


@settings(max_examples=2000, deadline=None)
@given(many_alike())
def test_reusing_an_earlier_jobs_outcome_decides_exactly_as_trying_every_job(snap):
    with mock.patch.object(Cycle, "_like_an_earlier_job", lambda self, tag, job, attempt: attempt(job)):
        every_job_tried = plan(snap, NOW)
    assert plan(snap, NOW) == every_job_tried


@settings(max_examples=1000, deadline=None)
@given(many_alike())
def test_best_fit_over_distinct_capacities_places_exactly_as_scanning_every_node(snap):
    # Both indexes: free capacity (admissions) and free plus releasing (preemption plans).
    from scheduler import placement

    def scan_every_node(view, scope, req, combined, trial):
        g, c, m = req.resources.as_tuple()
        best = None
        for name in scope.names_for(req.instance_type):
            avail = trial.get(name) or placement.base_avail(view, name, combined)
            if avail[0] >= g and avail[1] >= c and avail[2] >= m:
                key = (avail[0] - g, avail[1] - c, avail[2] - m, name)
                best = key if best is None or key < best else best
        return None if best is None else (best[3], best[:3])

    with mock.patch.object(placement, "best_fit", scan_every_node):
        every_node_scanned = plan(snap, NOW)
    assert plan(snap, NOW) == every_node_scanned


@settings(max_examples=1000, deadline=None)
@given(many_alike())
def test_victim_search_skipping_nodes_that_cannot_beat_the_best_chooses_as_trying_every_node(snap):
    from scheduler import preemption

    with mock.patch.object(preemption, "cannot_beat", lambda *args: False):
        every_node_tried = plan(snap, NOW)
    assert plan(snap, NOW) == every_node_tried


@SETTINGS
@given(snapshots())
def test_victim_search_over_nodes_with_candidates_or_room_chooses_as_trying_every_node(snap):
    from scheduler import preemption

    with mock.patch.object(preemption, "nodes_to_try",
                           lambda scope, req, candidates: scope.names_for(req.instance_type)):
        every_node_tried = plan(snap, NOW)
    assert plan(snap, NOW) == every_node_tried


@SETTINGS
@given(snapshots())
def test_no_job_planned_after_a_reserved_head_delays_it(snap):
    # Without terminating pods, and in cycles that preempt nothing, a reservation counts only on
    # running pods ending by its time (borrowers, the head's to reclaim, once reclaimable): the
    # head must fit its reserved nodes once they have, and the jobs admitted In Quota after it
    # have. (Borrowers may use the reserved capacity: they are the head's to reclaim.)
    snap = replace(snap, pods=tuple(replace(p, terminating=False) for p in snap.pods))
    d = plan(snap, NOW)
    if d.preemptions:
        return
    jobs = {j.job_id: j for j in snap.jobs}
    quotas = {q.id: q for q in snap.quotas}
    for w in d.waiting:
        if w.reserved_from is None:
            continue
        head, at = jobs[w.job_id], w.reserved_from
        left = [p for p in snap.pods if p.node in w.reserved_nodes and gone_at(p, quotas, NOW) > at]
        for a in d.admissions:
            if a.kind == "idle":
                continue
            job = jobs[a.job_id]
            if job.quota_id == head.quota_id and ends_before(job, at, NOW):
                continue  # backfilled: its maximum running time ends it by then
            req = {(p.role, p.index): p for p in job.pods}
            left += [RunningPod(f"{a.job_id}-{pl.index}", a.job_id, pl.node,
                                req[(pl.role, pl.index)].resources, "guaranteed", NOW)
                     for pl in a.placements if pl.node in w.reserved_nodes]
        nodes = [n for n in snap.nodes if n.name in w.reserved_nodes]
        view = CapacityView(tuple(nodes), tuple(left))
        assert place_gang(view, view.scope(("r",), nodes), head.pods) is not None, w
