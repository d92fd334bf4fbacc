"""Choosing victims: the fewest running pods whose capacity lets a job fit (rules 4 and 7).

A search is given the candidates of each node already in victim order (see `reclaim_order` and
`stock_order`). For each pod of the gang it picks the node that needs the fewest victims, then
the earliest ones in victim order, then best fit; afterwards it drops every victim the gang
turned out not to need. Computing victims is separate from issuing them (plan.py does that).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Callable

from .capacity import CapacityView, Scope
from .model import KIND_IDLE, PodRequest, RunningPod
from .placement import largest_first, place_gang

Ranked = list[tuple[tuple, RunningPod]]


class Candidates:
    """Possible victims per node, in victim order, with their total capacity.

    Built lazily per node and rebuilt only when a pod on that node has been preempted (the
    node's list of terminating pods grew), so jobs of one quota share the work.
    """

    def __init__(self, view: CapacityView, eligible: Callable[[RunningPod], bool],
                 order: Callable[[RunningPod], tuple]):
        self.view, self.eligible, self.order = view, eligible, order
        self._memo: dict[str, tuple[int, Ranked, tuple[int, int, int]]] = {}
        self._holders: dict[tuple, tuple[str, ...]] = {}

    def __call__(self, name: str) -> tuple[Ranked, tuple[int, int, int]]:
        state = self.view.states[name]
        hit = self._memo.get(name)
        if hit is None or hit[0] != len(state.terminating):
            ranked = sorted((self.order(p), p) for p in state.pods if self.eligible(p))
            hit = self._memo[name] = (len(state.terminating), ranked,
                                      tuple(_sum(p for _, p in ranked)))
        return hit[1], hit[2]

    def holders(self, scope: Scope, instance_type: str | None) -> tuple[str, ...]:
        """The scope's nodes of that type that held a candidate when first asked. Within a cycle
        a node's candidates only go (preempted), never come, so no other node can hold one."""
        key = (scope.key, instance_type)
        found = self._holders.get(key)
        if found is None:
            found = self._holders[key] = tuple(n for n in scope.names_for(instance_type) if self(n)[0])
        return found


def nodes_to_try(scope: Scope, req: PodRequest, candidates: Candidates) -> list[str]:
    """The nodes where a victim search may place `req`: those holding a candidate and those
    with room for it without one (free plus releasing capacity, which victims chosen for the
    gang's earlier pods do not change). Trying every node of a public pool for each search grew
    with the square of the pool's size."""
    g, c, m = req.resources.as_tuple()
    names = set(candidates.holders(scope, req.instance_type))
    for avail, group in scope.by_combined.get(req.instance_type, {}).items():
        if avail[0] >= g and avail[1] >= c and avail[2] >= m:
            names.update(group)
    return sorted(names)


def reclaim_order(pod: RunningPod, lender_quota: str, now: datetime, job_gpus: int = 1,
                  share=0) -> tuple:
    """Victims of a reclaim (or of priority preemption) are tried in this order:

    1. borrowers first: idle pods of other quotas, then idle pods of the lender itself, then
       (only with priority preemption) the lender's own lower-priority guaranteed pods;
       among borrowers, the quota furthest above its weighted share first (`share`, its
       borrowed share at the start of the cycle: fair_share.py);
    2. lower priority first;
    3. least work lost first: a preempted pod ends its whole job (a gang runs all together or
       not at all), so the work lost is the job's GPUs (`job_gpus`, a pod without GPUs counting
       one) times the time since its newest checkpoint, else since its most recent start;
    4. pod id, a deterministic tie-break.
    """
    if pod.kind == KIND_IDLE:
        rank = 1 if pod.quota_id == lender_quota else 0
    else:
        rank = 2
    return (rank, -share if rank < 2 else 0, pod.priority, (now - pod.work_since()) * job_gpus,
            pod.pod_id)


def stock_order(pod: RunningPod, now: datetime) -> tuple:
    """Spot pods released for stock: lowest bid first, then least work lost, then pod id."""
    return (pod.bid if pod.bid is not None else Decimal(0), now - pod.work_since(), pod.pod_id)


def find_victims(view: CapacityView, scope: Scope, requests: tuple[PodRequest, ...],
                 candidates: Candidates) -> list[RunningPod] | None:
    """The victims that make the gang fit (counting releasing capacity), or None."""
    trial: dict[str, tuple[int, int, int]] = {}
    chosen: list[tuple[tuple, RunningPod]] = []
    taken: set[str] = set()
    for req in largest_first(requests):
        best = None
        g, c, m = req.resources.as_tuple()
        for name in nodes_to_try(scope, req, candidates):
            cands, most = candidates(name)
            avail = trial.get(name) or view.states[name].combined()
            if avail[0] + most[0] < g or avail[1] + most[1] < c or avail[2] + most[2] < m:
                continue  # even every candidate on this node would not make room
            if best is not None and cannot_beat(best[0], (g, c, m), avail, cands, taken):
                continue
            option = _node_option(name, req, avail, cands, taken)
            if option is not None and (best is None or option[0] < best[0]):
                best = option
        if best is None:
            return None
        (_, _, _, name), needed, left = best
        trial[name] = left
        chosen.extend(needed)
        taken.update(p.pod_id for _, p in needed)
    return _drop_unneeded(view, scope, requests, sorted(chosen, key=lambda kp: kp[0]))


def cannot_beat(best: tuple, need, avail, cands: Ranked, taken: set[str]) -> bool:
    """Whether a node's option is sure to sort after `best` (a _node_option key), judged without
    working it out: a node short of room needs a victim, and its first victim comes no earlier
    than its first candidate. Working out every node's option made a search grow with the size
    of its scope, and a public pool's searches with the square of it."""
    if all(avail[i] >= need[i] for i in range(3)):
        return False
    if best[0] == 0:
        return True
    if best[0] > 1:
        return False
    first = next((key for key, pod in cands if pod.pod_id not in taken), None)
    return first is None or first > best[1][0]


def _node_option(name, req, avail, cands, taken):
    """How to fit `req` on node `name`: (sort key, victims needed, availability left) or None."""
    need = req.resources.as_tuple()
    deficit = tuple(max(0, need[i] - avail[i]) for i in range(3))
    needed = _fewest_covering([kp for kp in cands if kp[1].pod_id not in taken], deficit)
    if needed is None:
        return None
    freed = _sum(p for _, p in needed)
    left = tuple(avail[i] + freed[i] - need[i] for i in range(3))
    return (len(needed), tuple(k for k, _ in needed), left, name), needed, left


def _fewest_covering(cands, deficit):
    """The fewest candidates whose capacity covers `deficit`, earliest in victim order.

    The k largest pods decide the smallest k that can work; then each slot takes the earliest
    candidate that still lets the remaining slots finish the job.
    """
    if not any(deficit):
        return []
    k = _smallest_count(cands, deficit)
    if k is None:
        return None
    chosen, rest = [], list(cands)
    for slot in range(k, 0, -1):
        for i, (key, pod) in enumerate(rest):
            left = _minus(deficit, pod.resources.as_tuple())
            others = rest[:i] + rest[i + 1:]
            if not any(left) or _smallest_count(others, left, limit=slot - 1) is not None:
                chosen.append((key, pod))
                deficit, rest = left, others
                break
    return chosen if not any(deficit) else None


def _smallest_count(cands, deficit, limit=None):
    """How many of the largest candidates cover `deficit` (None if not within `limit`)."""
    if not any(deficit):
        return 0
    by_size = sorted(cands, key=lambda kp: tuple(-x for x in kp[1].resources.as_tuple()))
    acc = deficit
    for count, (_, pod) in enumerate(by_size[:limit], start=1):
        acc = _minus(acc, pod.resources.as_tuple())
        if not any(acc):
            return count
    return None


def _minus(deficit, amounts):
    return tuple(max(0, deficit[i] - amounts[i]) for i in range(3))


def _sum(pods):
    out = [0, 0, 0]
    for pod in pods:
        for i, amount in enumerate(pod.resources.as_tuple()):
            out[i] += amount
    return out


def _drop_unneeded(view, scope, requests, chosen):
    """Try leaving out each victim, last in victim order first; keep only the needed ones."""
    kept = list(chosen)
    for item in reversed(chosen):
        without = [kp for kp in kept if kp is not item]
        if place_gang(view, scope, requests, combined=True, extra=_freed(without)) is not None:
            kept = without
    return [p for _, p in kept]


def _freed(victims: list[tuple[tuple, RunningPod]]) -> dict[str, tuple[int, int, int]]:
    out: dict[str, tuple[int, int, int]] = {}
    for _, pod in victims:
        g, c, m = out.get(pod.node, (0, 0, 0))
        r = pod.resources
        out[pod.node] = (g + r.gpu, c + r.cpu_m, m + r.mem_mib)
    return out
