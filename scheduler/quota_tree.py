"""The quota tree: ancestors, subtrees, guarantees and lending scopes (rules 1 and 2).

Quota accounting is a few small functions over the tree, Kueue style: `guarantee`, `usage`,
`add_usage`, `short_dimension`. Usage counts guaranteed pods of a quota and its descendants.
"""

from __future__ import annotations

from collections import defaultdict

from .model import KIND_GUARANTEED, LINGJUN, Node, Quota, RunningPod
from .resources import ZERO, Resources


class QuotaTree:
    def __init__(self, quotas: tuple[Quota, ...], nodes: tuple[Node, ...]):
        self.quotas = {q.id: q for q in sorted(quotas, key=lambda q: q.id)}
        self._ancestors = {qid: self._walk_up(qid) for qid in self.quotas}
        self.usage: dict[str, Resources] = {qid: ZERO for qid in self.quotas}
        self.held: dict[str, Resources] = {qid: ZERO for qid in self.quotas}  # part of usage: see hold()
        self.version = 0  # bumps whenever usage changes
        self.nodes_of: dict[str, list[Node]] = defaultdict(list)  # subtree nodes, by quota
        own: dict[str, list[int]] = {}
        for node in sorted(nodes, key=lambda n: n.name):
            if node.quota_id in self.quotas:
                _add(own.setdefault(node.quota_id, [0, 0, 0]), node.capacity)
                for qid in self.chain(node.quota_id):
                    self.nodes_of[qid].append(node)
        self.guarantee: dict[str, Resources] = self._subtree_sums(own)

    def _walk_up(self, qid: str) -> tuple[str, ...]:
        """Parents up to the root; a broken parent link or a loop ends the walk."""
        seen, out = {qid}, []
        parent = self.quotas[qid].parent_id
        while parent in self.quotas and parent not in seen:
            out.append(parent)
            seen.add(parent)
            parent = self.quotas[parent].parent_id
        return tuple(out)

    def ancestors(self, qid: str) -> tuple[str, ...]:
        return self._ancestors[qid]

    def chain(self, qid: str) -> tuple[str, ...]:
        """The quota itself, then its ancestors up to the root."""
        return (qid,) + self._ancestors[qid]

    def root(self, qid: str) -> str:
        return self.chain(qid)[-1]

    def in_subtree(self, qid: str | None, of: str) -> bool:
        return qid in self.quotas and of in self.chain(qid)

    def add_usage(self, qid: str, amount: Resources) -> None:
        self.version += 1
        for q in self.chain(qid):
            self.usage[q] = self.usage[q] + amount

    def hold(self, qid: str, amount: Resources) -> None:
        """Usage of a job that waits for pods to terminate on its quota's nodes, booked for the rest
        of the cycle as if admitted; kept apart too, so that a "quota full" reason can say so."""
        self.add_usage(qid, amount)
        for q in self.chain(qid):
            self.held[q] = self.held[q] + amount

    def count_running(self, pods: tuple[RunningPod, ...]) -> None:
        """Add the guaranteed pods' usage: summed per quota first, then once up each chain."""
        own: dict[str, list[int]] = {}
        for pod in pods:
            if pod.kind == KIND_GUARANTEED and pod.quota_id in self.quotas:
                _add(own.setdefault(pod.quota_id, [0, 0, 0]), pod.resources)
        self.version += 1
        for qid, used in self._subtree_sums(own).items():
            self.usage[qid] = self.usage[qid] + used

    def _subtree_sums(self, own: dict[str, list[int]]) -> dict[str, Resources]:
        """Per quota, the sum of `own` over the quota and its descendants."""
        sums = {qid: [0, 0, 0] for qid in self.quotas}
        for qid, (g, c, m) in own.items():
            for q in self.chain(qid):
                acc = sums[q]
                acc[0] += g
                acc[1] += c
                acc[2] += m
        return {qid: Resources(*acc) for qid, acc in sums.items()}

    def short_quota(self, qid: str, need: Resources) -> tuple[str, str] | None:
        """The first quota on the chain (own first) whose guarantee `need` would exceed.

        Returns (quota id, dimension) or None when every level has room.
        """
        for q in self.chain(qid):
            used, limit = self.usage[q], self.guarantee[q]
            if (used.gpu + need.gpu > limit.gpu or used.cpu_m + need.cpu_m > limit.cpu_m
                    or used.mem_mib + need.mem_mib > limit.mem_mib):
                return q, (used + need).first_short(limit)
        return None

    def idle_scope_key(self, qid: str) -> tuple:
        """Where idle jobs of `qid` may borrow (rule 2).

        ECS: the nodes of its root quota tree. Lingjun: the nodes of every Lingjun quota of the
        same tenant whose instance type is one of the instance types of this quota's nodes.
        """
        quota = self.quotas[qid]
        if quota.resource_type == LINGJUN:
            types = tuple(sorted({n.instance_type for n in self.nodes_of.get(qid, ())}))
            return ("lingjun", quota.tenant, types)
        return ("tree", self.root(qid))

    def idle_scope_nodes(self, key: tuple) -> list[Node]:
        if key[0] == "tree":
            return list(self.nodes_of.get(key[1], ()))
        _, tenant, types = key
        return [n for q in self.quotas.values() if q.tenant == tenant
                and q.resource_type == LINGJUN and q.parent_id not in self.quotas
                for n in self.nodes_of.get(q.id, ()) if n.instance_type in types]

    def describe_scope(self, key: tuple) -> str:
        if key[0] == "tree":
            return f"quota tree {key[1]}"
        return f"Lingjun quotas of tenant {key[1]} ({', '.join(key[2]) or 'no nodes'})"



def _add(acc: list[int], res: Resources) -> None:
    acc[0] += res.gpu
    acc[1] += res.cpu_m
    acc[2] += res.mem_mib
