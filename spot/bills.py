"""Billing runs: DailyBill rows from the pods' running time and the recorded market prices.

``bill_jobs(days, now)`` bills every spot and pay-as-you-go pod (all incarnations, current or
not) that ran during the given UTC day(s), up to ``now``, with the pure rules of market.billing:
each running minute of a spot pod at that minute's PriceHistory price, of a pay-as-you-go pod
at the on-demand price, per node-minute, no conversion. A pod runs from ``started_at`` to
``finished_at`` (still running: to ``now``), so the lifecycle must set both.

It is idempotent: bills are written with update_or_create on (job, spec, day, pay type) and are
recomputed from scratch, so rerunning gives the same rows and a run later in the day replaces
the "cost so far" with a larger one. Pods of quota jobs (guaranteed, idle) are prepaid: no bill.

Market prices: the series holds each PriceHistory price from its minute on; the last row before
the day starts carries into it. Minutes before a type's first recorded price are charged that
first price; a type with no price at all cannot be billed as spot, and its pods are skipped with
a warning (the market tick records a price every minute, so this is a platform fault).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import date, datetime, time, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs.models import Job, Pod, PodKind
from market import billing
from quotas.models import ResourceSpec
from spot.models import DailyBill, PriceHistory

log = logging.getLogger(__name__)
PAY_TYPES = {PodKind.SPOT: billing.SPOT, PodKind.PAYG: billing.POSTPAID}


def bill_jobs(days: date | tuple[date, date] | None = None, now: datetime | None = None) -> list[DailyBill]:
    """Write the DailyBills of ``days`` (one date, or (first, last) inclusive; default: today)."""
    now = now or timezone.now()
    first, last = days if isinstance(days, tuple) else (days or now.astimezone(dt_timezone.utc).date(),) * 2
    start = datetime.combine(first, time.min, tzinfo=dt_timezone.utc)
    end = min(datetime.combine(last + timedelta(days=1), time.min, tzinfo=dt_timezone.utc), now)
    if end <= start:
        return []
    usages, specs = pod_usages(start, end, now)
    series = spot_series({u.instance_type for u in usages if u.pay_type == billing.SPOT}, start, end)
    billable = [u for u in usages if u.pay_type == billing.POSTPAID or u.instance_type in series]
    for skipped in {u.instance_type for u in usages} - {u.instance_type for u in billable}:
        log.warning("no market price recorded for %s: its spot pods are not billed", skipped)
    on_demand = {it: spec.on_demand_price_per_minute for it, spec in specs.items()}
    return _write(billing.daily_bills(billable, on_demand, series), specs)


def pod_usages(start: datetime, end: datetime, now: datetime) -> tuple[list[billing.PodUsage], dict[str, ResourceSpec]]:
    """The running intervals of billable pods, clipped to [start, end), and their specs."""
    pods = (
        Pod.objects.filter(kind__in=list(PAY_TYPES), started_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .select_related("job").prefetch_related("job__specs__spec")
    )
    usages, specs = [], {}
    for pod in pods:
        spec = next((s.spec for s in pod.job.specs.all() if s.role == pod.role), None)
        if spec is None:
            log.warning("pod %s has no role %s in its job: not billed", pod.pod_id, pod.role)
            continue
        interval = (max(pod.started_at, start), min(pod.finished_at or now, end))
        specs[spec.instance_type] = spec
        usages.append(billing.PodUsage(str(pod.job_id), pod.pod_id, spec.instance_type, PAY_TYPES[pod.kind], [interval]))
    return usages, specs


def spot_series(instance_types: set[str], start: datetime, end: datetime) -> dict[str, billing.PriceSeries]:
    """Per instance type, the held-price series covering [start, end) (see the module docstring)."""
    prices: dict[str, dict[datetime, Decimal]] = defaultdict(dict)
    rows = PriceHistory.objects.filter(spec__instance_type__in=instance_types, at__gte=start, at__lt=end)
    for instance_type, at, price in rows.values_list("spec__instance_type", "at", "price"):
        prices[instance_type][at] = price
    for instance_type in instance_types:
        before = (PriceHistory.objects.filter(spec__instance_type=instance_type, at__lt=start)
                  .order_by("-at").values_list("price", flat=True).first())
        if before is None and prices[instance_type]:
            before = prices[instance_type][min(prices[instance_type])]
        if before is not None:
            prices[instance_type].setdefault(start, before)
    return {it: billing.PriceSeries(p) for it, p in prices.items() if p}


@transaction.atomic
def _write(bills: list[billing.DailyBill], specs: dict[str, ResourceSpec]) -> list[DailyBill]:
    jobs = Job.objects.only("workspace", "user", "accessibility").in_bulk({int(b.job_id) for b in bills})
    rows = []
    for bill in bills:
        job = jobs.get(int(bill.job_id))
        if job is None:  # deleted since its pods were read, and its bills with it
            continue
        counts = {"minutes": bill.minutes, "amount": bill.amount, "on_demand_amount": bill.on_demand_amount}
        row, _ = DailyBill.objects.update_or_create(
            job_id=job.pk, spec=specs[bill.instance_type], day=bill.day, pay_type=bill.pay_type,
            defaults=counts, create_defaults={**counts, **DailyBill.copied(job)},
        )
        rows.append(row)
    return rows


def job_cost(job: Job) -> dict[str, Decimal]:
    """What a job's bills add up to so far: amount, on-demand equivalent and savings."""
    bills = list(job.bills.all())
    amount = sum((b.amount for b in bills), Decimal(0))
    on_demand = sum((b.on_demand_amount for b in bills), Decimal(0))
    return {"amount": amount, "on_demand_amount": on_demand, "savings": on_demand - amount}
