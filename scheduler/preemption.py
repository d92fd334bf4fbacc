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

Candidates = Callable[[str], list[tuple[tuple, RunningPod]]]


def reclaim_order(pod: RunningPod, lender_quota: str, now: datetime) -> tuple:
    """Victims of a reclaim (or of priority preemption) are tried in this order:

    1. borrowers first: idle pods of other quotas, then idle pods of the lender itself, then
       (only with priority preemption) the lender's own lower-priority guaranteed pods;
    2. lower priority first;
    3. least work lost first: the newest checkpoint, else the most recent start (`now` minus
       that time is the work a restart repeats);
    4. pod id, a deterministic tie-break.
    """
    if pod.kind == KIND_IDLE:
        rank = 1 if pod.quota_id == lender_quota else 0
    else:
        rank = 2
    return (rank, pod.priority, now - pod.work_since(), pod.pod_id)


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
        for name in scope.names_for(req.instance_type):
            option = _node_option(view, name, req, trial, candidates(name), taken)
            if option is not None and (best is None or option[0] < best[0]):
                best = option
        if best is None:
            return None
        (_, _, _, name), needed, left = best
        trial[name] = left
        chosen.extend(needed)
        taken.update(p.pod_id for _, p in needed)
    return _drop_unneeded(view, scope, requests, sorted(chosen, key=lambda kp: kp[0]))


def _node_option(view, name, req, trial, cands, taken):
    """How to fit `req` on node `name`: (sort key, victims needed, availability left) or None."""
    state = view.states[name]
    avail = list(trial.get(name) or state.combined())
    need = req.resources.as_tuple()
    needed = []
    for key, pod in cands:
        if all(need[i] <= avail[i] for i in range(3)):
            break
        if pod.pod_id in taken:
            continue
        needed.append((key, pod))
        for i, amount in enumerate(pod.resources.as_tuple()):
            avail[i] += amount
    left = tuple(avail[i] - need[i] for i in range(3))
    if min(left) < 0:
        return None
    return (len(needed), tuple(k for k, _ in needed), left, name), needed, left


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
