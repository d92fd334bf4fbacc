"""Spot inventory of a public pool: may a new bid get capacity, and how much spot must go.

Pay-as-you-go demand takes inventory before spot (docs/design.md rule 7), so the pool keeps a
reserve for it: new spot bids are closed while granting them would leave less than the reserve free.
All quantities are in one integer unit (nodes or GPUs, the caller chooses).

SpotStockStatus of a request for ``requested`` units, with free = capacity - payg - spot in use
and reserve = ceil(reserve_ratio * capacity):

- ``WithoutStock``    free < requested: the request does not fit at all right now.
- ``ClosedWithStock`` it fits, but free - requested < reserve: stock exists, held back for
                      pay-as-you-go, closed to new spot bids.
- ``WithStock``       it fits and leaves at least the reserve free: a bid at or above the market
                      price is admitted.

Eviction for shortage is a separate path from price (``spot_shortage``): running spot pods are
released only when pay-as-you-go plus spot exceed capacity, never to refill the reserve.
"""

from __future__ import annotations

import math

WITH_STOCK = "WithStock"
CLOSED_WITH_STOCK = "ClosedWithStock"
WITHOUT_STOCK = "WithoutStock"
DEFAULT_RESERVE_RATIO = 0.1


def free_capacity(pool_capacity: int, payg_in_use: int, spot_in_use: int) -> int:
    return max(pool_capacity - payg_in_use - spot_in_use, 0)


def reserve(pool_capacity: int, reserve_ratio: float = DEFAULT_RESERVE_RATIO) -> int:
    """Units kept free for pay-as-you-go; rounded up so a non-zero ratio always keeps something."""
    return math.ceil(reserve_ratio * pool_capacity)


def stock_status(
    pool_capacity: int,
    payg_in_use: int,
    spot_in_use: int,
    requested: int = 1,
    *,
    reserve_ratio: float = DEFAULT_RESERVE_RATIO,
) -> str:
    """SpotStockStatus for a request of ``requested`` units (see the module docstring)."""
    if requested < 1:
        raise ValueError("requested must be at least 1 unit")
    free = free_capacity(pool_capacity, payg_in_use, spot_in_use)
    if free < requested:
        return WITHOUT_STOCK
    if free - requested < reserve(pool_capacity, reserve_ratio):
        return CLOSED_WITH_STOCK
    return WITH_STOCK


def spot_shortage(pool_capacity: int, payg_demand: int, spot_in_use: int) -> int:
    """Units of running spot to release so that pay-as-you-go demand fits (0 when it already does)."""
    return max(payg_demand + spot_in_use - pool_capacity, 0)
