"""Quota accounting for the console and ListQuotas: a few small functions over the quota tree.

For each quota, counting its sub-quotas with it (a parent's guarantee is its children's nodes too):
  capacity         the resources of its nodes (its guarantee)
  guaranteed_used  what its guaranteed (In Quota) pods hold
  lent             what idle pods of other quotas' jobs hold on its nodes
  borrowed         what its own idle (Not in Quota) pods hold on other quotas' nodes
A pod counts while it holds capacity: bound to a node and not yet reported finished.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from jobs.states import LIVE_STATUSES
from jobs.models import Pod, PodKind
from quotas.models import Node, Quota
from scheduler import ZERO, Resources


@dataclass(frozen=True)
class QuotaUsage:
    quota_id: str
    capacity: Resources
    guaranteed_used: Resources
    lent: Resources
    borrowed: Resources

    @property
    def guaranteed_free(self) -> Resources:
        return self.capacity - self.guaranteed_used


def subtrees() -> dict[int, set[int]]:
    """Quota pk -> the pks of the quota and all its descendants."""
    parent = dict(Quota.objects.values_list("pk", "parent_id"))
    out: dict[int, set[int]] = {pk: {pk} for pk in parent}
    for pk in parent:
        up, seen = parent[pk], {pk}
        while up is not None and up not in seen:  # a broken loop ends the walk
            out[up].add(pk)
            seen.add(up)
            up = parent.get(up)
    return out


def usage_by_quota() -> dict[int, QuotaUsage]:
    """Every quota's usage, keyed by Quota pk, from two queries."""
    tree = subtrees()
    node_quota = dict(Node.objects.values_list("pk", "quota_id"))
    capacity = _node_capacity()
    pods = list(Pod.objects.filter(node__isnull=False, status__in=LIVE_STATUSES)
                .values_list("node_id", "job__quota_id", "kind", "gpu", "cpu_m", "mem_mib"))
    ids = dict(Quota.objects.values_list("pk", "quota_id"))
    return {pk: _usage(ids[pk], members, node_quota, capacity, pods) for pk, members in tree.items()}


def quota_usage(quota: Quota) -> QuotaUsage:
    return usage_by_quota()[quota.pk]


def _node_capacity() -> dict[int, Resources]:
    return {pk: Resources(gpu, cpu * 1000, mem) for pk, gpu, cpu, mem in
            Node.objects.values_list("pk", "spec__gpu", "spec__cpu", "spec__memory_mib")}


def _usage(quota_id: str, members: set[int], node_quota: dict, capacity: dict, pods: list) -> QuotaUsage:
    sums = defaultdict(lambda: ZERO)
    for node, qpk in node_quota.items():
        if qpk in members:
            sums["capacity"] += capacity[node]
    for node_id, job_quota, kind, gpu, cpu_m, mem in pods:
        held, mine, on_mine = Resources(gpu, cpu_m, mem), job_quota in members, node_quota.get(node_id) in members
        if mine and kind == PodKind.GUARANTEED:
            sums["guaranteed_used"] += held
        elif kind == PodKind.IDLE and on_mine and not mine:
            sums["lent"] += held
        elif kind == PodKind.IDLE and mine and not on_mine:
            sums["borrowed"] += held
    return QuotaUsage(quota_id, sums["capacity"], sums["guaranteed_used"], sums["lent"], sums["borrowed"])
