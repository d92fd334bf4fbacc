"""Step 2 of a schedule cycle: the snapshot of the cluster that scheduler.plan decides on.

Nodes (Ready or not: a lost node's pods still hold capacity), the quota tree, the pods holding
capacity and the market prices, read as values, not model instances, since a large cycle builds
tens of thousands of them. The waiting jobs come from cycle/waiting.py, which keeps them between
cycles and reads only what changed.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

import scheduler
from cycle import typical
from jobs.models import Job, JobSpec, Pod, elastic_range
from jobs.states import JobStatus, PodStatus
from quotas.models import Node, NodeStatus, Quota, ResourceSpec
from scheduler import reservation
from spot.market_state import current_markets


def cluster(jobs: tuple[scheduler.PendingJob, ...]) -> scheduler.Snapshot:
    """The snapshot without its markets, which are priced at the cycle's now (read after this)."""
    pods = _running_pods()
    return scheduler.Snapshot(nodes=_nodes(), quotas=_quotas(typical.for_cycle(timezone.now())),
                              pods=pods, jobs=jobs, elastic=_growable(pods))


def _nodes() -> tuple[scheduler.Node, ...]:
    # Not-ready and cordoned nodes are in the snapshot too (ready=False): their pods still hold
    # capacity, but no new pod goes there.
    specs = {spec.pk: (spec.instance_type, scheduler.Resources(spec.gpu, spec.cpu_m, spec.memory_mib))
             for spec in ResourceSpec.objects.all()}
    return tuple(
        scheduler.Node(name, *specs[spec], quota, ready=status == NodeStatus.READY and not cordoned)
        for name, spec, quota, status, cordoned in Node.objects.order_by("name").values_list(
            "name", "spec_id", "quota__name", "status", "cordoned")
    )


def _quotas(typical_runs: dict[str | None, timedelta]) -> tuple[scheduler.Quota, ...]:
    # The scheduler knows a quota by its name (unique): its wait and preemption messages are read
    # by people ("Quota nlp-team is full", "reclaimed by quota cv-team").
    return tuple(
        scheduler.Quota(name, str(tenant), parent, *rest, backfill=backfill, weight=weight,
                        typical_run=typical_runs.get(name, typical.DEFAULT_RUN))
        for name, tenant, parent, backfill, weight, *rest in Quota.objects.order_by("pk").values_list(
            "name", "tenant_id", "parent__name", "backfill", "weight", "resource_type", "queue_strategy",
            "allow_priority_preemption", "min_runtime_before_preemption_s")
    )


def _running_pods() -> tuple[scheduler.RunningPod, ...]:
    with transaction.atomic(), _plain_index_scans():
        rows = list(_live_pods())
    bids = _role_bids({r.job_id for r in rows if r.kind == scheduler.KIND_SPOT})
    return tuple(_running_pod(r, bids.get((r.job_id, r.role))) for r in rows)


def _live_pods():
    return Pod.objects.holding().order_by("pk").values_list(
        "pod_id", "job__job_id", "node__name", "gpu", "cpu_m", "mem_mib", "kind", "started_at", "bound_at",
        "created_at", "job__quota__name", "job__priority", "gpu_indices", "job__last_checkpoint_at", "terminating",
        "job_id", "role", "job__running_at", "job__max_running_time_minutes", "index", "job__elastic_spec",
        named=True)


@contextmanager
def _plain_index_scans():
    """PostgreSQL: the statements inside read an index with a plain index scan, not a bitmap scan
    nor the whole table.

    The live pods' partial index (pod_live_bound) keeps the entry of a pod that has ended until
    VACUUM removes it; a plain index scan that finds such an entry's row dead to every
    transaction marks it dead (PostgreSQL's kill_prior_tuple), and later scans skip it, but a
    bitmap scan never marks anything. The planner picked the bitmap scan, so the index grew to
    every pod run since the last VACUUM and each cycle read all of it (docs/performance.md)."""
    if connection.vendor != "postgresql":
        yield
        return
    # Nor a scan of the whole table, which a small one gets. For this transaction only (call it in
    # one: an error rolls the settings back with it), and as they were after the statements.
    scans = ("enable_bitmapscan", "enable_seqscan")
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(f"current_setting('{name}'), set_config('{name}', 'off', true)"
                                             for name in scans))
        before = cursor.fetchone()[::2]
        yield
        cursor.execute("SELECT " + ", ".join(f"set_config('{name}', %s, true)" for name in scans), before)


def _running_pod(row, bid: tuple[Decimal | None, int] | None) -> scheduler.RunningPod:
    started = row.started_at or row.bound_at or row.created_at
    protection = started + timedelta(hours=bid[1]) if bid else None
    return scheduler.RunningPod(
        row.pod_id, row.job__job_id, row.node__name, scheduler.Resources(row.gpu, row.cpu_m, row.mem_mib),
        row.kind or scheduler.KIND_GUARANTEED,  # unknown kind: treat as never preemptible
        started, row.job__quota__name, row.job__priority, tuple(row.gpu_indices), row.job__last_checkpoint_at,
        row.terminating, bid[0] if bid else None, protection, _expected_end(row, started), _spare(row),
    )


def _spare(row) -> bool:
    """A worker above its elastic job's MinParallelism: its first workers by index are the gang
    that started it, and only workers above them are ever shrunk away (scheduler/elastic.py)."""
    found = elastic_range(row.job__elastic_spec)
    return found is not None and row.index >= found[0]


def _growable(pods: tuple[scheduler.RunningPod, ...]) -> tuple[scheduler.ElasticJob, ...]:
    """Running elastic jobs with unbound workers, every bound worker running and none stopping:
    a job still starting or being resized does not grow until that is done."""
    jobs = {pk: rest for pk, *rest in Job.objects.filter(
        status=JobStatus.RUNNING, elastic_spec__EnableElasticTraining=True).values_list(
        "pk", "job_id", "quota__name", "priority")}
    if not jobs:
        return ()
    busy = set(Pod.objects.filter(job_id__in=jobs, current=True, node__isnull=False).exclude(
        status=PodStatus.RUNNING).values_list("job_id", flat=True))
    held: dict[str, list[scheduler.RunningPod]] = {}
    for pod in pods:
        held.setdefault(pod.job_id, []).append(pod)
    types = {(job, role): itype for job, role, itype in JobSpec.objects.filter(job_id__in=jobs).values_list(
        "job_id", "role", "spec__instance_type")}
    more: dict[int, list[scheduler.PodRequest]] = {}
    for job, role, index, gpu, cpu_m, mem_mib in Pod.objects.filter(
            job_id__in=jobs, current=True, node__isnull=True, status=PodStatus.PENDING).order_by(
            "index").values_list("job_id", "role", "index", "gpu", "cpu_m", "mem_mib"):
        more.setdefault(job, []).append(scheduler.PodRequest(role, index, scheduler.Resources(gpu, cpu_m, mem_mib),
                                                             types.get((job, role))))
    out = []
    for pk, (job_id, quota, priority) in sorted(jobs.items(), key=lambda kv: kv[1][0]):
        running = held.get(job_id, [])
        if pk in busy or pk not in more or not running or any(p.terminating for p in running):
            continue
        out.append(scheduler.ElasticJob(job_id, quota, running[0].kind, len(running), tuple(more[pk]), priority))
    return tuple(out)


def _expected_end(row, started):
    """By the job's maximum running time, counted from Running as jobs.lifecycle counts it; a job
    without one is expected to run its quota's typical run (scheduler/reservation.py)."""
    minutes = row.job__max_running_time_minutes
    if not minutes:
        return None
    return reservation.expected_end(row.job__running_at or started, timedelta(minutes=minutes), None)


def _role_bids(job_pks) -> dict[tuple[int, str], tuple[Decimal | None, int]]:
    """(job pk, role) -> (bid per node-minute, protection hours) for spot roles."""
    rows = JobSpec.objects.filter(job_id__in=job_pks).values_list(
        "job_id", "role", "spot_price_limit", "spot_discount_limit", "spec__on_demand_price_per_minute",
        "spot_duration_hours") if job_pks else []
    return {(job, role): (JobSpec.bid(limit, discount, on_demand), hours)
            for job, role, limit, discount, on_demand, hours in rows}


def markets(now) -> tuple[scheduler.MarketState, ...]:
    # spot.market_state owns the market: the price in force now and the last hour's average
    # weighted by how long each price held (the Lingjun release rule), per public pool.
    priced = current_markets(now)
    if not priced:
        return ()
    specs = dict(ResourceSpec.objects.values_list("instance_type", "resource_type"))
    return tuple(
        scheduler.MarketState(instance_type, market.price, market.avg_last_hour, specs[instance_type])
        for instance_type, market in sorted(priced.items())
    )
