"""What jobs spent on the public pool, from the daily bills spot/bills.py writes: per day and pay type,
the amount, its pay-as-you-go equivalent and the savings (market.billing's rules, summed by the database)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db.models import Q, Sum

from market.engine import PRICE_PLACES
from spot.models import DailyBill

ZERO = Decimal("0")


@dataclass(frozen=True)
class Spend:
    """Node-minutes billed, what they cost, and what they would have cost at the pay-as-you-go price."""

    minutes: int
    amount: Decimal
    on_demand_amount: Decimal

    @property
    def savings(self) -> Decimal:
        return self.on_demand_amount - self.amount

    @classmethod
    def summed(cls, row: dict, **key) -> Spend:
        """From a row annotated with SUMS (minutes, amount, on_demand), and the row's key fields."""
        return cls(row["minutes"] or 0, exact(row["amount"]), exact(row["on_demand"]), **key)


SUMS = {"minutes": Sum("minutes"), "amount": Sum("amount"), "on_demand": Sum("on_demand_amount")}


@dataclass(frozen=True)
class DaySpend(Spend):
    day: date
    pay_type: str  # spot or postpaid (pay-as-you-go)


def spend_by_day(who: Q, first: date, last: date) -> list[DaySpend]:
    """The bills from `first` to `last` inclusive of the jobs `who` selects (quotas.services.UsageScope.who,
    a condition on the fields workspace, user and accessibility that bills copy from their job), summed per
    day and pay type."""
    rows = (
        DailyBill.objects.filter(who, day__gte=first, day__lte=last)
        .values("day", "pay_type")
        .annotate(**SUMS)
        .order_by("day", "pay_type")
    )
    return [DaySpend.summed(r, day=r["day"], pay_type=r["pay_type"]) for r in rows]


def exact(total) -> Decimal:
    # SQLite sums decimals as floats: back to the bills' own 6 places.
    return Decimal(total or ZERO).quantize(PRICE_PLACES)


@dataclass(frozen=True)
class GroupSpend(Spend):
    name: str  # "" for bills of jobs with no value there (a spot job has no quota)


def spend_by(bills, field: str) -> list[GroupSpend]:
    """`bills` (a DailyBill queryset) summed per value of `field` (a lookup such as job__user__username),
    the largest amount first, then by name."""
    rows = bills.order_by().values(field).annotate(**SUMS)
    groups = [GroupSpend.summed(r, name=r[field] or "") for r in rows]
    return sorted(groups, key=lambda g: (-g.amount, g.name))
