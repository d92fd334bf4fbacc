"""Market figures the pages show, read in a fixed number of queries.

Prices are stored per node-minute (ResourceSpec.on_demand_price_per_minute, PriceHistory.price);
pages show them per hour (market.units, through the `per_hour` and `hourly` filters).
"""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlencode

from django.db.models import Exists, OuterRef
from django.utils import timezone

from console.forms import BID_FIELDS, BidForm
from jobs.services import SPOT_FIELDS
from market import units
from market.advisor import BidOutlook
from market.bids import SPOT_WITH_PRICE_LIMIT, bid_price, market_range, validate_spot_bid
from market.engine import spot_discount
from quotas.models import Node, ResourceSpec
from scheduler.spot import CLOSED_WITH_STOCK, WITH_STOCK, WITHOUT_STOCK
from spot.market_state import bid_outlooks, current_markets
from spot.models import PriceHistory

RANGES = {"1d": 1, "3d": 3, "7d": 7}
# SpotStockStatus for one more node, as scheduler/spot.py decides it, in a user's words.
STOCK_MEANINGS = {
    WITH_STOCK: "a spot node can start now: free nodes remain beyond the reserve kept for pay-as-you-go.",
    CLOSED_WITH_STOCK: "nodes are free, but they are the reserve kept for pay-as-you-go (10% of the pool); spot bids wait.",
    WITHOUT_STOCK: "no node is free; spot bids wait until one is, whatever their price.",
}


def public_specs():
    """Instance types that have a public pool (nodes in no quota): the ones spot and public use."""
    pool = Node.objects.filter(spec=OuterRef("pk"), quota__isnull=True)
    return ResourceSpec.objects.filter(Exists(pool)).order_by("resource_type", "gpu", "instance_type")


def market_rows(now=None) -> list[dict]:
    """Per public pool: on-demand, current and last-hour average market price, discount, stock."""
    markets = current_markets(now)
    rows = []
    for spec in public_specs():
        low, high = market_range(spec.on_demand_price_per_minute)
        market = markets.get(spec.instance_type)
        price = market.price if market else None
        discount = spot_discount(price, spec.on_demand_price_per_minute) if price is not None else None
        stock = market.stock_status if market else ""
        rows.append({
            "spec": spec, "on_demand": spec.on_demand_price_per_minute, "price": price,
            "average": market.avg_last_hour if market else None, "discount": discount,
            "saving": None if discount is None else 1 - discount,
            "stock_status": stock, "stock_meaning": STOCK_MEANINGS.get(stock, ""), "low": low, "high": high,
        })
    return rows


def history(spec: ResourceSpec, days: int, now=None) -> list[tuple]:
    """(time, per-minute price) of the last `days` days, with the price in force at the window's start."""
    now = now or timezone.now()
    start = now - timedelta(days=days)
    points = list(PriceHistory.objects.filter(spec=spec, at__gte=start, at__lte=now).order_by("at").values_list("at", "price"))
    before = PriceHistory.objects.filter(spec=spec, at__lt=start).order_by("-at").values_list("price", flat=True).first()
    if before is not None:
        points.insert(0, (start, before))
    return points


def chart_price(price_per_minute: Decimal) -> float:
    """A price as the History Price chart plots it: per hour (market.units), as a float for Plotly."""
    return float(units.per_hour(price_per_minute))


@dataclass(frozen=True)
class Advice:
    """The bid advisor's panel for one instance type and one bid (console/market/_advice.html)."""

    spec: ResourceSpec
    form: BidForm  # bound; its errors name the input at fault
    bid: Decimal | None = None  # per node-minute; None: no bid yet, or a refused one
    outlooks: tuple[BidOutlook, ...] = ()

    @property
    def query(self) -> str:
        """The bid as the History Price chart's query string (no other field of the form)."""
        if self.bid is None:
            return ""
        data = self.form.cleaned_data
        value = data["bid_discount"] if data["bid_kind"] == "discount" else data["bid_price_limit"]
        return urlencode({"bid_kind": data["bid_kind"], f"bid_{data['bid_kind']}": value})


def advise(spec: ResourceSpec, form: BidForm, now=None) -> Advice:
    """How the form's bid would have fared on the spec's market (spot.market_state.bid_outlooks).
    The bid is checked by market.bids.validate_spot_bid, as create_job checks it; its refusals go
    on the form's inputs."""
    if not form.is_valid():
        return Advice(spec, form)
    limits = form.spot_limits()
    if all(v is None for v in limits.values()):
        return Advice(spec, form)  # nothing to judge yet
    on_demand = spec.on_demand_price_per_minute
    spot_spec = {"SpotStrategy": SPOT_WITH_PRICE_LIMIT, "SpotDiscountLimit": limits["spot_discount_limit"],
                 "SpotPriceLimit": limits["spot_price_limit"]}
    for problem in validate_spot_bid(spot_spec, resource_type=spec.resource_type, on_demand_price=on_demand):
        if problem["field"].startswith("SpotSpec"):  # a VPC is the job's business, not the bid's
            field = BID_FIELDS[SPOT_FIELDS[problem["field"]]]
            form.add_error(field, problem["message"])
    if form.errors:
        return Advice(spec, form)
    bid = bid_price(on_demand, discount=limits["spot_discount_limit"], price_limit=limits["spot_price_limit"])
    return Advice(spec, form, bid, tuple(bid_outlooks(spec, bid, now)))
