"""Spot bids: validate a SpotSpec, turn it into a price, and decide whether it still holds.

Validation returns every problem at once as ``{"field", "message"}`` dicts (field paths use the
API's names, e.g. ``SpotSpec.SpotDiscountLimit``, ``UserVpc.VpcId``), each message saying what is
allowed, so the form and the API can show them next to the right input. An empty list means valid.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Mapping, TypedDict

from market.engine import FLOOR, PRICE_PLACES, price_of
from market.units import API_UNIT, hourly

SPOT_WITH_PRICE_LIMIT = "SpotWithPriceLimit"
ECS = "ECS"
LINGJUN = "Lingjun"
DISCOUNTS = tuple(Decimal(n) / 10 for n in range(1, 10))  # 0.1 .. 0.9
SPOT_DURATIONS = (0, 1)  # protection period in hours
DEFAULT_SPOT_DURATION_HOURS = 1  # when SpotDuration is not given, as on PAI
VPC_FIELDS = ("VpcId", "SwitchId", "SecurityGroupId")


class FieldError(TypedDict):
    field: str
    message: str


def _error(field: str, message: str) -> FieldError:
    return {"field": field, "message": message}


def as_decimal(value: Any) -> Decimal | None:
    """A finite Decimal from a number or numeric string; None for anything else (bools included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        return None
    try:
        # repr() of a float is its shortest round-trip form, so 0.3 becomes Decimal("0.3").
        number = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def shown(value: Any) -> str:
    """A value as the user wrote it, for a message: a number plainly (0.95, not Decimal('0.95')),
    anything else as Python writes it (text quoted)."""
    return str(value) if isinstance(value, Decimal) else repr(value)


def market_range(on_demand_price: Decimal) -> tuple[Decimal, Decimal]:
    """The prices a bid may name: 10 % of on-demand up to on-demand."""
    low = (FLOOR * on_demand_price).quantize(PRICE_PLACES, rounding=ROUND_HALF_UP)
    return low, on_demand_price.quantize(PRICE_PLACES, rounding=ROUND_HALF_UP)


def _discount_errors(value: Any) -> list[FieldError]:
    discount = as_decimal(value)
    if discount is None or discount not in DISCOUNTS:  # Decimal equality: 0.40 counts as 0.4
        return [_error("SpotSpec.SpotDiscountLimit", f"must be one of 0.1, 0.2, ... 0.9 (steps of 0.1), got {shown(value)}")]
    return []


def _price_limit_errors(value: Any, on_demand_price: Decimal) -> list[FieldError]:
    low, high = market_range(on_demand_price)
    price = as_decimal(value)
    if price is None or not low <= price <= high:
        # Per hour as every page shows prices, then in the field's own unit for whoever wrote it.
        got = hourly(price) if price is not None else shown(value)
        return [_error("SpotSpec.SpotPriceLimit", f"must be within the market range {hourly(low)} to {hourly(high)}, got {got} "
                                                  f"(SpotPriceLimit is {API_UNIT}, PAI's unit: {low} to {high}, got {shown(value)})")]
    return []


def _limit_errors(spec: Mapping[str, Any], resource_type: str, on_demand_price: Decimal) -> list[FieldError]:
    has_discount = spec.get("SpotDiscountLimit") is not None
    has_price = spec.get("SpotPriceLimit") is not None
    if resource_type == LINGJUN and has_price:
        return [_error("SpotSpec.SpotPriceLimit", "Lingjun resources accept only discount bids: set SpotDiscountLimit (0.1 to 0.9) instead")]
    if has_discount and has_price:
        return [_error("SpotSpec", "set exactly one of SpotDiscountLimit or SpotPriceLimit, not both")]
    if has_discount:
        return _discount_errors(spec["SpotDiscountLimit"])
    if has_price:
        return _price_limit_errors(spec["SpotPriceLimit"], on_demand_price)
    return [_error("SpotSpec", "set exactly one of SpotDiscountLimit (0.1 to 0.9) or SpotPriceLimit")]


def _vpc_errors(user_vpc: Mapping[str, Any] | None) -> list[FieldError]:
    user_vpc = user_vpc or {}
    return [
        _error(f"UserVpc.{name}", f"is required for a spot job on Lingjun resources (UserVpc needs {', '.join(VPC_FIELDS)})")
        for name in VPC_FIELDS
        if not user_vpc.get(name)
    ]


def _duration_errors(spot_duration: Any) -> list[FieldError]:
    if spot_duration is None or (not isinstance(spot_duration, bool) and spot_duration in SPOT_DURATIONS):
        return []
    return [_error("SpotDuration", f"the protection period must be 0 or 1 (hours), got {spot_duration!r}")]


def validate_spot_bid(
    spot_spec: Mapping[str, Any] | None,
    *,
    resource_type: str,
    on_demand_price: Decimal,
    user_vpc: Mapping[str, Any] | None = None,
    spot_duration: Any = None,
) -> list[FieldError]:
    """All the problems of a spot bid for an instance type of the given on-demand price."""
    if resource_type not in (ECS, LINGJUN):
        raise ValueError(f"resource_type must be {ECS!r} or {LINGJUN!r}")
    spec = spot_spec or {}
    errors: list[FieldError] = []
    if spec.get("SpotStrategy") != SPOT_WITH_PRICE_LIMIT:
        errors.append(_error("SpotSpec.SpotStrategy", f"must be {SPOT_WITH_PRICE_LIMIT!r}, got {spec.get('SpotStrategy')!r}"))
    errors += _limit_errors(spec, resource_type, on_demand_price)
    if resource_type == LINGJUN:
        errors += _vpc_errors(user_vpc)
    return errors + _duration_errors(spot_duration)


def bid_price(on_demand_price: Decimal, *, discount: Any = None, price_limit: Any = None) -> Decimal:
    """What a bid is worth, per unit of on-demand pricing: discount x on-demand, rounded as the
    market price is (market.engine.price_of), or the price limit. The one definition: the
    scheduler's snapshot (JobSpec.bid) and the benchmarks read it.

    Call after validate_spot_bid; invalid input raises ValueError.
    """
    if (discount is None) == (price_limit is None):
        raise ValueError("give exactly one of discount or price_limit")
    value = as_decimal(discount if discount is not None else price_limit)
    if value is None:
        raise ValueError("the bid must be a number")
    if discount is not None:
        return price_of(value, on_demand_price)
    return value.quantize(PRICE_PLACES, rounding=ROUND_HALF_UP)
