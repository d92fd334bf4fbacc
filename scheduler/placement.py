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
    """The best node for one pod, given availability already changed by `trial`.

    Each distinct availability of the scope's nodes (free, or free plus releasing when
    `combined`: Scope.groups) is looked at once, and the nodes of `trial` one by one: a scan of
    every node per pod was most of a cycle's plan time (bench/cycle_profile.py), and grew with
    the square of a pool's size (bench/scheduler_core.py)."""
    g, c, m = req.resources.as_tuple()
    itype = req.instance_type
    best = None
    for name, avail in trial.items():
        state = view.states[name]
        if scope not in state.scopes or (itype is not None and state.node.instance_type != itype):
            continue
        if avail[0] >= g and avail[1] >= c and avail[2] >= m:
            key = (avail[0] - g, avail[1] - c, avail[2] - m, name)
            if best is None or key < best:
                best = key
    for free, names in scope.groups(combined).get(itype, {}).items():
        if free[0] < g or free[1] < c or free[2] < m:
            continue
        left = (free[0] - g, free[1] - c, free[2] - m)
        if best is not None and left > best[:3]:
            continue
        name = next((n for n in names if n not in trial), None)  # the first name: names are sorted
        if name is not None and (best is None or (*left, name) < best):
            best = (*left, name)
    return None if best is None else (best[3], best[:3])


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


def gang_fits(view: CapacityView, scope: Scope, requests: tuple[PodRequest, ...]) -> bool:
    """Whether place_gang would place the gang now. For a gang of alike pods it counts how many
    pods fit on the nodes of each distinct free capacity (Scope.by_free) and stops as soon as
    there is room for all: the greedy placement fills every node that has room, so it succeeds
    exactly when those counts add up."""
    first = requests[0]
    if any(r.resources != first.resources or r.instance_type != first.instance_type
           for r in requests):
        return place_gang(view, scope, requests) is not None
    need = first.resources.as_tuple()
    room = 0
    for free, names in scope.by_free.get(first.instance_type, {}).items():
        if free[0] < need[0] or free[1] < need[1] or free[2] < need[2]:
            continue
        if not any(need):
            return True
        room += len(names) * min(free[i] // need[i] for i in range(3) if need[i])
        if room >= len(requests):
            return True
    return False


def never_fits(view: CapacityView, scope: Scope, req: PodRequest) -> bool:
    """True when the pod is larger than every (empty) node of the scope."""
    need = req.resources
    return not any(need.fits(view.states[n].node.capacity)
                   for n in scope.names_for(req.instance_type))


Shape = tuple[tuple[str, tuple[int, int, int]], ...]


class FailedShapes:
    """Gang shapes that did not fit, per cache key (a scope and what capacity was counted).

    Within one key capacity only shrinks, so a gang that failed fails again, and so does any
    gang at least as big: as many pods or more, each at least as large, of the same instance
    type. Remembering that lets a cycle skip most of a long queue in a few dictionary lookups.

    `rank` orders what a try may use under one key, each rank's a subset of the next (a victim
    search by a job of lower priority may preempt fewer pods): a gang that failed at a rank also
    fails at every lower one.
    """

    def __init__(self):
        self._exact: dict[tuple, int] = {}  # (key, shape) -> the highest rank it failed at
        # (key, instance type) -> minimal failed uniform gangs: (pod count, gpu, cpu, mem, rank)
        self._uniform: dict[tuple, list[tuple[int, int, int, int, int]]] = {}

    def known(self, key: tuple, shape: Shape, rank: int = 0) -> bool:
        if self._exact.get((key, shape), rank - 1) >= rank:
            return True
        uniform = _uniform(shape)
        if uniform is None:
            return False
        itype, (g, c, m), count = uniform
        for n, fg, fc, fm, fr in self._uniform.get((key, itype), ()):
            if n <= count and fg <= g and fc <= c and fm <= m and rank <= fr:
                return True
        return False

    def add(self, key: tuple, shape: Shape, rank: int = 0) -> None:
        self._exact[(key, shape)] = max(rank, self._exact.get((key, shape), rank))
        uniform = _uniform(shape)
        if uniform is not None:
            itype, (g, c, m), count = uniform
            kept = [f for f in self._uniform.get((key, itype), ())
                    if not (count <= f[0] and g <= f[1] and c <= f[2] and m <= f[3]
                            and rank >= f[4])]
            self._uniform[(key, itype)] = kept + [(count, g, c, m, rank)]


def _uniform(shape: Shape):
    """(instance type, resources, count) when every pod of the gang is alike, else None."""
    if not shape or any(item != shape[0] for item in shape):
        return None
    return shape[0][0], shape[0][1], len(shape)


def never_fits_cached(view: CapacityView, scope: Scope, req: PodRequest,
                      memo: dict[tuple, bool]) -> bool:
    key = (scope.key, req.instance_type, req.resources.as_tuple())
    found = memo.get(key)
    if found is None:
        found = memo[key] = never_fits(view, scope, req)
    return found
