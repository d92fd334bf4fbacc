"""Gang placement (rule 5): all pods of a job or none, each pod best-fit.

Best fit = the node that leaves the fewest free GPUs, then the least CPU, then the least memory,
then the node name (a deterministic tie-break). Pods are placed largest first, so the big pods
get the nodes that suit them and the small ones fill the gaps.
"""

from __future__ import annotations

from .capacity import CapacityView, Scope
from .model import PodRequest

Avail = tuple[int, int, int]


def largest_first(requests: tuple[PodRequest, ...]) -> list[PodRequest]:
    return sorted(requests, key=lambda r: (-r.resources.gpu, -r.resources.cpu_m,
                                           -r.resources.mem_mib, r.role, r.index))


def base_avail(view: CapacityView, name: str, combined: bool) -> Avail:
    state = view.states[name]
    return state.combined() if combined else (state.free[0], state.free[1], state.free[2])


def best_fit(view: CapacityView, scope: Scope, req: PodRequest, combined: bool,
             trial: dict[str, Avail]) -> tuple[str, Avail] | None:
    """The best node for one pod, given availability already changed by `trial`."""
    g, c, m = req.resources.as_tuple()
    best = None
    for name in scope.names_for(req.instance_type):
        avail = trial.get(name) or base_avail(view, name, combined)
        left = (avail[0] - g, avail[1] - c, avail[2] - m)
        if left[0] < 0 or left[1] < 0 or left[2] < 0:
            continue
        if best is None or (left, name) < best:
            best = (left, name)
    return None if best is None else (best[1], best[0])


def place_gang(view: CapacityView, scope: Scope, requests: tuple[PodRequest, ...],
               combined: bool = False, extra: dict[str, Avail] | None = None,
               ) -> list[tuple[PodRequest, str]] | None:
    """Nodes for every pod of the gang, or None when the gang does not fit.

    combined: count releasing (terminating) capacity as available.
    extra: capacity per node to add on top (the victims a preemption would free).
    """
    trial: dict[str, Avail] = {}
    for name, more in (extra or {}).items():
        a = base_avail(view, name, combined)
        trial[name] = (a[0] + more[0], a[1] + more[1], a[2] + more[2])
    out = []
    for req in largest_first(requests):
        found = best_fit(view, scope, req, combined, trial)
        if found is None:
            return None
        trial[found[0]] = found[1]
        out.append((req, found[0]))
    return out


def never_fits(view: CapacityView, scope: Scope, req: PodRequest) -> bool:
    """True when the pod is larger than every (empty) node of the scope."""
    need = req.resources
    return not any(need.fits(view.states[n].node.capacity)
                   for n in scope.names_for(req.instance_type))
