"""What the public pool of each instance type looks like now, read from the database.

The public pool of an instance type is its nodes of no quota (docs/design.md rule 7). Quantities are
in one integer unit per instance type, the unit the pure market engine counts in: GPUs for a GPU
type, CPU millicores for a CPU-only type. A pod counts what it asked for in that unit; a pod that
recorded no request holds a whole node.

- supply: Ready public nodes;
- pay-as-you-go and spot in use: pods holding capacity (``Pod.objects.holding()``) of kind
  ``payg`` / ``spot`` on a public node of the type;
- spot bids: roles of spot jobs in Bidding on the type, as (bid per node-minute, units).

Stock (SpotStockStatus) is counted in whole nodes, as the scheduler counts it
(scheduler.spot.stock_status): Ready public nodes, and those of them no pod holds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Exists, OuterRef, Q

from jobs.models import JobSpec, Pod, PodKind, Source
from jobs.states import JobStatus
from market.engine import PoolObservation, queued_demand
from quotas.models import Node, NodeStatus, ResourceSpec
from scheduler.spot import stock_status


def unit_of(spec: ResourceSpec) -> int:
    """Units one node of the type offers: its GPUs, or its millicores for a CPU-only type."""
    return spec.gpu if spec.gpu else spec.cpu_m


@dataclass
class PoolUsage:
    spec: ResourceSpec
    nodes: int = 0  # public nodes of any status: the pool exists when > 0
    ready_nodes: int = 0
    free_nodes: int = 0  # Ready public nodes that no pod holds
    capacity: int = 0  # units of Ready public nodes
    payg_in_use: int = 0
    spot_in_use: int = 0
    bids: list[tuple[Decimal, int]] = field(default_factory=list)

    @property
    def unit(self) -> int:
        return unit_of(self.spec)

    def observation(self, price: Decimal) -> PoolObservation:
        """The market's view at ``price``: only bids that pay it count as queued demand."""
        return PoolObservation(self.capacity, self.payg_in_use, self.spot_in_use, queued_demand(self.bids, price))

    def stock_status(self) -> str:
        """SpotStockStatus for one more instance (an empty pool is WithoutStock)."""
        return stock_status(self.ready_nodes, self.free_nodes)


def public_pools(specs=None) -> dict[str, PoolUsage]:
    """PoolUsage per instance type that has at least one public node, in a few queries."""
    specs = specs if specs is not None else ResourceSpec.objects.all()
    ready = Q(status=NodeStatus.READY)
    held = Pod.objects.holding().filter(node=OuterRef("pk"))
    counts = (
        Node.objects.filter(quota__isnull=True, spec__in=specs)
        .values("spec")
        .annotate(total=Count("id"), ready=Count("id", filter=ready),
                  free=Count("id", filter=ready & ~Q(Exists(held))))
    )
    by_pk = {s.pk: s for s in specs}
    pools = {}
    for row in counts:
        spec = by_pk[row["spec"]]
        pools[spec.instance_type] = PoolUsage(spec, row["total"], row["ready"], row["free"],
                                              row["ready"] * unit_of(spec))
    if pools:  # a cluster of quota nodes only (no public pool) has no market to read
        _add_pods(pools)
        _add_bids(pools)
    return pools


def _pod_units(pool: PoolUsage, pod: dict) -> int:
    asked = pod["gpu"] if pool.spec.gpu else pod["cpu_m"]
    if not pod["gpu"] and not pod["cpu_m"]:
        return pool.unit
    return asked


def _add_pods(pools: dict[str, PoolUsage]) -> None:
    pods = Pod.objects.holding().filter(
        kind__in=(PodKind.PAYG, PodKind.SPOT), node__quota__isnull=True,
        node__spec__instance_type__in=list(pools),
    ).values("kind", "gpu", "cpu_m", "node__spec__instance_type")
    for pod in pods:
        pool = pools[pod["node__spec__instance_type"]]
        if pod["kind"] == PodKind.PAYG:
            pool.payg_in_use += _pod_units(pool, pod)
        else:
            pool.spot_in_use += _pod_units(pool, pod)


def _add_bids(pools: dict[str, PoolUsage]) -> None:
    roles = JobSpec.objects.filter(
        job__status=JobStatus.BIDDING, job__source=Source.SPOT, spec__instance_type__in=list(pools),
    ).select_related("spec")
    grouped: dict[str, list] = defaultdict(list)
    for role in roles:
        bid = role.bid_price
        if bid is not None:
            grouped[role.spec.instance_type].append((bid, role.pod_count * unit_of(role.spec)))
    for instance_type, bids in grouped.items():
        pools[instance_type].bids = bids
