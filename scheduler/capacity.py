"""Free capacity per node during one cycle, and scopes (sets of nodes) with running totals.

Each node has `free` capacity and `releasing` capacity (held by terminating pods). Capacity only
moves one way inside a cycle: free -> admitted or reserved, used -> releasing. Nothing preempted
becomes free in the same cycle: the victims have to terminate first.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from .model import Node, RunningPod
from .resources import Resources


class NodeState:
    __slots__ = ("node", "free", "releasing", "free_ids", "pods", "terminating", "scopes")

    def __init__(self, node: Node):
        self.node = node
        cap = node.capacity
        self.free = [cap.gpu, cap.cpu_m, cap.mem_mib]
        self.releasing = [0, 0, 0]
        self.free_ids = list(node.gpu_indices())
        self.pods: list[RunningPod] = []  # running, not terminating: possible victims
        self.terminating: list[RunningPod] = []
        self.scopes: list[Scope] = []

    def combined(self) -> tuple[int, int, int]:
        f, r = self.free, self.releasing
        return (f[0] + r[0], f[1] + r[1], f[2] + r[2])


def _hold(state: NodeState, pod: RunningPod) -> None:
    """Count a running (or terminating) pod of the snapshot on its node."""
    res, free = pod.resources, state.free
    free[0] -= res.gpu
    free[1] -= res.cpu_m
    free[2] -= res.mem_mib
    if res.gpu or pod.gpu_indices:
        free_ids = state.free_ids
        ids = [g for g in pod.gpu_indices if g in free_ids]
        # A pod reported without (enough) GPU indices still holds that many GPUs.
        if len(ids) < res.gpu:
            ids += [g for g in free_ids if g not in ids][: res.gpu - len(ids)]
        if ids:
            state.free_ids = [g for g in free_ids if g not in ids]
    if pod.terminating:
        state.terminating.append(pod)
        rel = state.releasing
        rel[0] += res.gpu
        rel[1] += res.cpu_m
        rel[2] += res.mem_mib
    else:
        state.pods.append(pod)


class Scope:
    """A named set of ready nodes (a quota's own nodes, a lending scope, a public pool)."""

    __slots__ = ("key", "names", "by_type", "capacity", "free", "version", "released", "by_free",
                 "by_combined")

    def __init__(self, key: tuple, states: list[NodeState]):
        self.key = key
        self.names = tuple(s.node.name for s in states)
        by_type: dict[str, list[str]] = {}
        for s in states:
            by_type.setdefault(s.node.instance_type, []).append(s.node.name)
        self.by_type = {t: tuple(v) for t, v in sorted(by_type.items())}
        capacity, free = [0, 0, 0], [0, 0, 0]
        for s in states:
            cap, f = s.node.capacity, s.free
            capacity[0] += cap.gpu
            capacity[1] += cap.cpu_m
            capacity[2] += cap.mem_mib
            free[0] += f[0]
            free[1] += f[1]
            free[2] += f[2]
        self.capacity, self.free = capacity, free
        self.version = 0  # bumps whenever a node in it changes
        self.released = 0  # bumps whenever a pod on it is preempted: releasing capacity grew
        # instance type (None: any) -> free (gpu, cpu, mem) -> the names of the nodes with that much
        # free, sorted: best fit looks at each distinct free capacity once (placement.best_fit),
        # not at every node, and a cluster of alike nodes has few of them. `by_combined` is the
        # same for free plus releasing capacity, which preemption and reclaim plans count: a
        # scan of every node there made a cycle grow with the square of a public pool's size.
        self.by_free: dict[str | None, dict[tuple[int, int, int], list[str]]] = {}
        self.by_combined: dict[str | None, dict[tuple[int, int, int], list[str]]] = {}
        for s in states:
            _file(self.by_free, s, tuple(s.free))
            _file(self.by_combined, s, s.combined())

    def groups(self, combined: bool) -> dict[str | None, dict[tuple[int, int, int], list[str]]]:
        return self.by_combined if combined else self.by_free

    def names_for(self, instance_type: str | None) -> tuple[str, ...]:
        if instance_type is None:
            return self.names
        return self.by_type.get(instance_type, ())


def _file(index: dict, state: NodeState, amounts: tuple[int, int, int]) -> None:
    name = state.node.name
    for itype in (None, state.node.instance_type):
        insort(index.setdefault(itype, {}).setdefault(amounts, []), name)


def _refile(index: dict, state: NodeState, old: tuple[int, int, int],
            new: tuple[int, int, int]) -> None:
    """The node's entry in `index` went from `old` to `new`."""
    name = state.node.name
    for itype in (None, state.node.instance_type):
        groups = index[itype]
        names = groups[old]
        del names[bisect_left(names, name)]
        if not names:
            del groups[old]
    _file(index, state, new)

class CapacityView:
    def __init__(self, nodes: tuple[Node, ...], pods: tuple[RunningPod, ...]):
        self.states = {n.name: NodeState(n) for n in sorted(nodes, key=lambda n: n.name)}
        self.scopes: dict[tuple, Scope] = {}
        self.memo: dict[tuple, object] = {}  # facts keyed by what they depend on
        states = self.states
        self.job_gpus: dict[str, int] = {}  # each running job's GPUs, a pod without GPUs counting one
        for pod in pods:
            self.job_gpus[pod.job_id] = self.job_gpus.get(pod.job_id, 0) + max(1, pod.resources.gpu)
        for pod in sorted(pods, key=lambda p: p.pod_id):
            state = states.get(pod.node)
            if state is not None:
                _hold(state, pod)

    def scope(self, key: tuple, nodes: list[Node]) -> Scope:
        """The scope named `key` over the ready ones of `nodes` (built once per cycle)."""
        found = self.scopes.get(key)
        if found is None:
            states = [self.states[n.name] for n in sorted(nodes, key=lambda n: n.name)
                      if n.ready and n.name in self.states]
            found = self.scopes[key] = Scope(key, states)
            for s in states:
                s.scopes.append(found)
        return found

    def _change(self, state: NodeState, taken: tuple[int, int, int],
                released: tuple[int, int, int] = (0, 0, 0)) -> None:
        """Take `taken` from the node's free capacity and add `released` to its releasing
        capacity (either may be negative); every scope of the node sees the change."""
        old_free, old_combined = tuple(state.free), state.combined()
        for i in range(3):
            state.free[i] -= taken[i]
            state.releasing[i] += released[i]
        new_free, new_combined = tuple(state.free), state.combined()
        for scope in state.scopes:
            scope.version += 1
            for i in range(3):
                scope.free[i] -= taken[i]
            if new_free != old_free:
                _refile(scope.by_free, state, old_free, new_free)
            if new_combined != old_combined:
                _refile(scope.by_combined, state, old_combined, new_combined)

    def admit(self, name: str, res: Resources) -> tuple[int, ...]:
        """Take `res` from the node's free capacity; returns the GPU indices assigned."""
        state = self.states[name]
        ids, state.free_ids = state.free_ids[: res.gpu], state.free_ids[res.gpu:]
        self._change(state, res.as_tuple())
        return tuple(ids)

    def reserve(self, name: str, res: Resources) -> None:
        """Hold `res` for a job that waits: releasing capacity first, then free capacity."""
        state = self.states[name]
        want = res.as_tuple()
        from_releasing = tuple(min(max(state.releasing[i], 0), want[i]) for i in range(3))
        from_free = tuple(want[i] - from_releasing[i] for i in range(3))
        if from_free[0]:
            state.free_ids = state.free_ids[: len(state.free_ids) - from_free[0]]
        self._change(state, from_free, _neg(from_releasing))

    def block(self, name: str, amounts: tuple[int, int, int]) -> tuple:
        """Hold capacity for a reservation (scheduler/reservation.py), releasing capacity first,
        then free: no job planned later in the cycle gets it. Returns what unblock() needs."""
        state = self.states[name]
        from_releasing = tuple(min(max(state.releasing[i], 0), amounts[i]) for i in range(3))
        from_free = tuple(amounts[i] - from_releasing[i] for i in range(3))
        cut = len(state.free_ids) - from_free[0]
        ids, state.free_ids = tuple(state.free_ids[cut:]), state.free_ids[:cut]
        self._change(state, from_free, _neg(from_releasing))
        return from_releasing, from_free, ids

    def unblock(self, name: str, held: tuple) -> None:
        """Give back what block() held."""
        from_releasing, from_free, ids = held
        state = self.states[name]
        state.free_ids = sorted(state.free_ids + list(ids))
        self._change(state, _neg(from_free), from_releasing)

    def release(self, pod: RunningPod) -> None:
        """A victim chosen this cycle: its capacity is releasing, not free."""
        state = self.states[pod.node]
        state.pods = [p for p in state.pods if p is not pod]  # identity: eq compares fields
        state.terminating.append(pod)
        self._change(state, (0, 0, 0), pod.resources.as_tuple())
        for scope in state.scopes:
            scope.released += 1


def _neg(amounts: tuple[int, int, int]) -> tuple[int, int, int]:
    return (-amounts[0], -amounts[1], -amounts[2])
