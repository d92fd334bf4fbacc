"""Spot rules (docs/design.md rule 7): price checks and which running spot pods are released.

Spot and pay-as-you-go jobs run on the public pool of their instance type (nodes without a
quota). A spot job is admitted when its bid is at or above the current market price and the pool
has the stock; a running spot job is released when its bid falls below the release price (ECS:
the current price; Lingjun: the average price over the last hour), or when pay-as-you-go demand
needs its capacity, but never inside its protection period.

Stock (SpotStockStatus) is counted in whole nodes, the one definition the scheduler, the market
pages and ListEcsSpecs share: PAI sells spot by instance, a pod of the public pool takes a whole
node of its type, and GPUs free in pieces across busy nodes start no instance. Pay-as-you-go
takes inventory before spot, so the pool keeps a reserve of free nodes for it (RESERVE_RATIO of
its Ready nodes, rounded up). For a request of ``requested`` whole nodes:

- ``WithoutStock``    fewer free nodes than requested;
- ``ClosedWithStock`` it fits, but would leave fewer free nodes than the reserve;
- ``WithStock``       it fits and leaves the reserve free.

Running spot is released for stock only when pay-as-you-go needs the capacity (plan step 3),
never to refill the reserve.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from market.units import hourly

from .decisions import OUTBID, PreemptionReason
from .model import KIND_SPOT, LINGJUN, MarketState, PendingJob, RunningPod

WITH_STOCK = "WithStock"
CLOSED_WITH_STOCK = "ClosedWithStock"
WITHOUT_STOCK = "WithoutStock"
RESERVE_RATIO = Decimal("0.1")  # Decimal: 0.1 x 30 nodes in floats rounds up to 4


def reserve(nodes: int) -> int:
    """Free nodes kept for pay-as-you-go; rounded up so that any pool keeps one."""
    return math.ceil(RESERVE_RATIO * nodes)


def stock_status(nodes: int, free_nodes: int, requested: int = 1) -> str:
    """SpotStockStatus of a pool of ``nodes`` Ready nodes, ``free_nodes`` of them holding no pod,
    for a request of ``requested`` whole nodes (see the module docstring)."""
    if free_nodes < requested:
        return WITHOUT_STOCK
    if free_nodes - requested < reserve(nodes):
        return CLOSED_WITH_STOCK
    return WITH_STOCK


def reserve_closed(instance_type: str, nodes: int, free_nodes: int, requested: int) -> str | None:
    """Why a spot job that fits the pool may not take it (the reserve), or None when it may."""
    status = stock_status(nodes, free_nodes, requested)
    if status == WITH_STOCK:
        return None
    return (f"No stock for spot in the public pool of {instance_type} ({status}): {free_nodes} of "
            f"{nodes} nodes free, {reserve(nodes)} kept for pay-as-you-go; this job needs "
            f"{requested} node{'' if requested == 1 else 's'}")


def release_price(market: MarketState) -> Decimal:
    return market.avg_price_1h if market.resource_type == LINGJUN else market.price


def protected(pod: RunningPod, now: datetime) -> bool:
    return pod.protection_until is not None and pod.protection_until > now


def releasable(pod: RunningPod, now: datetime) -> bool:
    return pod.kind == KIND_SPOT and not pod.terminating and not protected(pod, now)


def outbid_releases(pods: tuple[RunningPod, ...], markets: dict[str, MarketState],
                    instance_type_of: dict[str, str], now: datetime,
                    ) -> list[tuple[RunningPod, PreemptionReason]]:
    """Spot pods whose job's bid is below the release price, unless any pod of it is protected.

    A job is released as a whole: its pods started together and share one bid.
    """
    by_job: dict[str, list[RunningPod]] = defaultdict(list)
    for pod in pods:
        if pod.kind == KIND_SPOT and not pod.terminating:
            by_job[pod.job_id].append(pod)
    out = []
    for job_id in sorted(by_job):
        job_pods = sorted(by_job[job_id], key=lambda p: p.pod_id)
        if any(protected(p, now) for p in job_pods):
            continue
        reason = _outbid_reason(job_pods, markets, instance_type_of)
        if reason is not None:
            out.extend((p, reason) for p in job_pods)
    return out


def _outbid_reason(job_pods, markets, instance_type_of) -> PreemptionReason | None:
    for pod in job_pods:
        market = markets.get(instance_type_of.get(pod.node, ""))
        if market is None or pod.bid is None:
            continue
        price = release_price(market)
        if pod.bid < price:
            which = ("average price over the last hour" if market.resource_type == LINGJUN
                     else "market price")
            msg = (f"Outbid: bid {hourly(pod.bid)} is below the {which} {hourly(price)} "
                   f"of {market.instance_type}")
            return PreemptionReason(OUTBID, msg, price=price, bid=pod.bid)
    return None


def bid_problem(job: PendingJob, markets: dict[str, MarketState]) -> tuple[str, str] | None:
    """('bid', message) when the bid is below a market price, ('market', message) when an
    instance type has no spot market, None when the bid is good for every pod."""
    for itype in sorted({p.instance_type or "" for p in job.pods}):
        market = markets.get(itype)
        if market is None:
            return "market", f"no spot market for instance type {itype or '(none given)'}"
        if job.bid is None or job.bid < market.price:
            return "bid", (f"bid {hourly(job.bid)} is below the market price {hourly(market.price)} "
                           f"of {itype}")
    return None
