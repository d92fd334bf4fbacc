"""Market data over the API: GetSpotPriceHistory (PaiStudio) and ListEcsSpecs (DLC).

Both speak in discounts, as PAI does: SpotDiscount / NonProtectSpotDiscount is the spot price
divided by the on-demand price of the instance type (0.35 = 35 % of on-demand), not money.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone

from apikit import params
from apikit.errors import invalid, not_found
from apikit.pagination import page_of
from apikit.schema import PAGING, sdk_action
from apikit.views import SdkView
from market.engine import spot_discount
from quotas.models import Node, NodeStatus, ResourceSpec, ResourceType
from scheduler.spot import WITHOUT_STOCK
from spot.models import PriceHistory
from spot.pool import public_pools

ZONE_ID = "local"  # one site, one zone
MAX_WINDOW = timedelta(days=7)
DEFAULT_WINDOW = timedelta(days=3)


def discount(price: Decimal, on_demand: Decimal) -> float | None:
    """The spot discount as the SDK's JSON number (market.engine.spot_discount)."""
    found = spot_discount(price, on_demand)
    return None if found is None else float(found)


class SpotPriceHistoryView(SdkView):
    """GET /api/v1/spots/{InstanceType}/pricehistory (GetSpotPriceHistory).

    Defaults from the SDK's documentation: EndTime now, StartTime three days before it, at most
    seven days apart; oldest first. Paging applies to Lingjun types only, as on PAI.
    """

    @sdk_action("GetSpotPriceHistory", "Spot price over time as a discount on the on-demand price",
                query=(*PAGING, "StartTime", "EndTime", "SpotDuration"))
    def get(self, request, instance_type):
        q = request.query_params
        spec = ResourceSpec.objects.filter(instance_type=instance_type).first()
        if spec is None:
            raise not_found("InstanceType", instance_type)
        start, end = _window(q)
        params.choice(q, "SpotDuration", ("0", "1"))  # the price does not depend on it; still checked
        params.choice(q, "SortBy", ("GmtCreatedTime", "Timestamp"))
        rows = PriceHistory.objects.filter(spec=spec, at__gte=start, at__lte=end)
        rows = rows.order_by("-at" if params.order(q, default="asc") == "desc" else "at")
        total = rows.count()
        if spec.resource_type == ResourceType.LINGJUN:
            page = page_of(q, default_size=10)
            rows = rows[page.offset : page.offset + page.size]
        return self.reply(request, {"SpotPriceHistory": history_items(spec, rows), "TotalCount": total})


def history_items(spec: ResourceSpec, rows) -> list[dict]:
    """GetSpotPriceHistory's SpotPriceItem of each PriceHistory row."""
    return [
        {"InstanceType": spec.instance_type, "ZoneId": ZONE_ID,
         "SpotDiscount": discount(row.price, spec.on_demand_price_per_minute),
         "Timestamp": params.fmt_time(row.at)}
        for row in rows.only("price", "at")
    ]


def _window(q):
    end = params.timestamp(q, "EndTime") or timezone.now()
    start = params.timestamp(q, "StartTime") or end - DEFAULT_WINDOW
    if start > end:
        raise invalid("StartTime", f"must not be after EndTime ({params.fmt_time(end)})")
    if end - start > MAX_WINDOW:
        raise invalid("StartTime", f"must be at most 7 days before EndTime ({params.fmt_time(end)})")
    return start, end


# --- ListEcsSpecs -------------------------------------------------------------------------------

ECS_SORT = {"CPU": "cpu", "Cpu": "cpu", "GPU": "gpu", "Gpu": "gpu", "Memory": "memory_mib", "GmtCreateTime": "pk"}
# Known GPU memory (GiB) of the GPU types we ship specs for; others are left empty.
GPU_MEMORY_GIB = {"NVIDIA A10": 24, "NVIDIA V100": 16, "GU108": 80}


class EcsSpecsView(SdkView):
    """GET /api/v1/ecsspecs (ListEcsSpecs): instance types with their spot discount and stock."""

    @sdk_action("ListEcsSpecs", "Instance types with spot discount and SpotStockStatus",
                query=(*PAGING, "AcceleratorType", "InstanceTypes", "ResourceType"))
    def get(self, request):
        q = request.query_params
        specs = _filtered_specs(q)
        field = ECS_SORT[params.choice(q, "SortBy", ECS_SORT, default="GmtCreateTime")]
        specs = specs.order_by(("-" if params.order(q, default="asc") == "desc" else "") + field, "instance_type")
        page = page_of(q, default_size=100)
        total = specs.count()
        rows = list(specs[page.offset : page.offset + page.size])
        market = spot_market(rows)
        return self.reply(request, {"EcsSpecs": [_ecs_spec(s, market[s.pk]) for s in rows], "TotalCount": total})


def _filtered_specs(q):
    specs = ResourceSpec.objects.all()
    if rtype := params.choice(q, "ResourceType", ResourceType.values):
        specs = specs.filter(resource_type=rtype)
    if accelerator := params.choice(q, "AcceleratorType", ("CPU", "GPU"), case_insensitive=True):
        specs = specs.filter(gpu__gt=0) if accelerator == "GPU" else specs.filter(gpu=0)
    if types := params.listed(q, "InstanceTypes"):
        specs = specs.filter(instance_type__in=types)
    return specs


def spot_market(specs: list[ResourceSpec]) -> dict[int, dict]:
    """Per spec: Ready nodes of its public pool and of all, latest price, SpotStockStatus of one more
    instance, as the scheduler and the Spot Market page count it (spot.pool)."""
    latest = PriceHistory.objects.filter(spec=OuterRef("pk")).order_by("-at")
    with_price = ResourceSpec.objects.filter(pk__in=[s.pk for s in specs]).annotate(
        price=Subquery(latest.values("price")[:1])
    )
    prices = {s.pk: s.price for s in with_price}
    pools = {pool.spec.pk: pool for pool in public_pools(specs).values()}
    ready = _count_by_spec(Node.objects.filter(status=NodeStatus.READY))
    out = {}
    for s in specs:
        pool = pools.get(s.pk)
        out[s.pk] = {"pool": pool.ready_nodes if pool else 0, "ready": ready.get(s.pk, 0), "price": prices.get(s.pk),
                     "stock": pool.stock_status() if pool else WITHOUT_STOCK}
    return out


def _count_by_spec(nodes) -> dict[int, int]:
    return {row["spec"]: row["n"] for row in nodes.values("spec").annotate(n=Count("pk"))}


def _ecs_spec(spec: ResourceSpec, market: dict) -> dict:
    price = market["price"]
    return {
        "InstanceType": spec.instance_type,
        "AcceleratorType": "GPU" if spec.gpu else "CPU",
        "ResourceType": spec.resource_type,
        "Cpu": spec.cpu,
        "Memory": spec.memory_gib,
        "Gpu": spec.gpu,
        "GpuType": spec.gpu_type,
        "GpuMemory": GPU_MEMORY_GIB.get(spec.gpu_type) if spec.gpu else 0,
        "IsAvailable": market["ready"] > 0,
        "PaymentTypes": ["PostPaid", "Spot"] if market["pool"] else [],
        "NonProtectSpotDiscount": discount(price, spec.on_demand_price_per_minute) if price is not None else None,
        "SpotStockStatus": market["stock"],
    }
