"""Quota usage: what the pods that hold capacity (Pod.objects.holding()) take of each quota.

The one account of it: the console's Quotas page, ListQuotas and GetQuota all read usage_by_quota().
Per quota, counting its sub-quotas with it, as the scheduler does (scheduler/quota_tree.py): a
parent's guarantee is its sub-quotas' nodes too, so its guaranteed use is theirs too.

  capacity         the resources of its nodes and its sub-quotas' nodes: its guarantee
  guaranteed_used  what guaranteed pods of its jobs and its sub-quotas' jobs hold: what the scheduler
                   counts against the guarantee (it places them on the quota's own nodes only, and
                   never beyond the guarantee, rule 1)
  self_used        the part of guaranteed_used that its own jobs hold (the SDK's SelfAllocatedQuota;
                   the rest is DescendantsAllocatedQuota)
  lent             what idle pods of jobs outside its subtree hold on its subtree's nodes
  borrowed         what idle pods of its subtree's jobs hold on nodes outside its subtree
Borrowing inside a subtree (a sub-quota's idle pod on a sibling's node) is lent and borrowed by the
two sub-quotas, and neither by their parent. Spot and pay-as-you-go pods run on the public pool and
take nothing of a quota.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields

from django.db.models import Count, Sum

from jobs.models import Pod, PodKind
from jobs.states import FINAL
from quotas.models import Node
from quotas.tree import chains
from scheduler import ZERO, Resources


@dataclass(frozen=True)
class QuotaUsage:
    capacity: Resources
    guaranteed_used: Resources
    self_used: Resources
    lent: Resources
    borrowed: Resources

    @property
    def descendants_used(self) -> Resources:
        return self.guaranteed_used - self.self_used

    @property
    def guaranteed_free(self) -> Resources:
        return self.capacity - self.guaranteed_used


def usage_by_quota() -> dict[int, QuotaUsage]:
    """Every quota's usage, keyed by Quota pk, from three queries (sums made by the database)."""
    chain = chains()
    sums = {f.name: defaultdict(lambda: ZERO) for f in fields(QuotaUsage)}
    for quota, held in _node_capacity():
        for up in chain.get(quota, ()):
            sums["capacity"][up] += held
    for host, owner, kind, held in _held():
        _count(sums, chain, host, owner, kind, held)
    return {pk: QuotaUsage(**{name: by_quota[pk] for name, by_quota in sums.items()}) for pk in chain}


def _count(sums: dict, chain: dict, host: int | None, owner: int | None, kind: str, held: Resources) -> None:
    """Book what pods of one kind hold: pods of jobs of the quota `owner` on nodes of the quota `host`."""
    mine, hosts = chain.get(owner, ()), chain.get(host, ())
    # A pod bound without a kind counts as guaranteed, as the scheduler counts it.
    if kind != PodKind.IDLE:
        for up in mine:
            sums["guaranteed_used"][up] += held
        if owner is not None:
            sums["self_used"][owner] += held
        return
    for up in hosts:
        if up not in mine:
            sums["lent"][up] += held
    for up in mine:
        if up not in hosts:
            sums["borrowed"][up] += held


def _node_capacity():
    rows = (Node.objects.filter(quota__isnull=False).values("quota")
            .annotate(gpu=Sum("spec__gpu"), cpu=Sum("spec__cpu"), mem=Sum("spec__memory_mib")).order_by())
    return [(r["quota"], Resources(r["gpu"], r["cpu"] * 1000, r["mem"])) for r in rows]


def _held():
    """(node's quota, job's quota, kind, resources) of the holding pods, summed per such group."""
    rows = (Pod.objects.holding().exclude(kind__in=(PodKind.SPOT, PodKind.PAYG))
            .values("node__quota", "job__quota", "kind")
            .annotate(gpu=Sum("gpu"), cpu_m=Sum("cpu_m"), mem_mib=Sum("mem_mib")).order_by())
    return [(r["node__quota"], r["job__quota"], r["kind"], Resources(r["gpu"], r["cpu_m"], r["mem_mib"]))
            for r in rows]


@dataclass(frozen=True)
class UserUsage:
    """What one user's jobs of a quota hold (`used`, their holding pods) and ask for (`submitted`,
    every current pod of their unfinished jobs), and how many such jobs they have."""

    used: Resources
    submitted: Resources
    workloads: int


def usage_by_user(quota_pks, workspace: int | None = None) -> dict[int, UserUsage]:
    """Per user (pk) with an unfinished job in the given quotas (of the workspace, when given),
    summed by the database."""
    def sums(pods, **extra):
        pods = pods.filter(job__quota__in=quota_pks)
        if workspace is not None:
            pods = pods.filter(job__workspace=workspace)
        rows = (pods.values("job__user")
                .annotate(gpu=Sum("gpu"), cpu_m=Sum("cpu_m"), mem_mib=Sum("mem_mib"), **extra).order_by())
        return {r["job__user"]: r for r in rows}

    used = sums(Pod.objects.holding())
    submitted = sums(Pod.objects.filter(current=True).exclude(job__status__in=FINAL),
                     jobs=Count("job", distinct=True))
    return {user: UserUsage(_resources(used.get(user)), _resources(row), row["jobs"])
            for user, row in submitted.items()}


def _resources(row) -> Resources:
    return Resources(row["gpu"], row["cpu_m"], row["mem_mib"]) if row else ZERO
