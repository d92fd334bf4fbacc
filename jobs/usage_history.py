"""What jobs used over a past range [start, end): GPU-seconds by workspace, quota, user and source,
the time jobs queued per quota (p50 / p95), and preemptions with the GPU-seconds they cost.

Every figure is summed by the database in one query, whatever the number of jobs (the Usage page
reads them over ranges of 100,000 jobs). jobs.usage is the other account, of what pods hold now.

- A pod runs from `started_at` to `finished_at` (still running: to `now`); its GPU-seconds in the
  range are `gpu` x the overlap of that interval with [start, end). Every incarnation counts.
- Its source is its kind: guaranteed (a quota's own nodes), idle (borrowed), spot, or public
  (pay-as-you-go on the public pool). A pod bound without a kind counts as guaranteed, as the
  scheduler counts it (jobs.usage).
- A job's queueing time runs from its submission to its first Running; it counts in the range
  its first Running falls in. Percentiles are nearest-rank: p of n values is the ceil(p*n/100)-th.
- A preemption is a pod that ended Evicted (Resource Preempted: reclaimed by a quota, released
  by the spot market, or drained off its node) inside the range. It cost the GPU-seconds since
  its job's last checkpoint, when that checkpoint fell in the pod's run, else since its start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, Count, ExpressionWrapper, F, FloatField, Func, Q, Sum, Value, When, Window
from django.db.models.fields import DateTimeField, DurationField
from django.db.models.functions import Coalesce, Greatest, Least, RowNumber
from django.db.models.lookups import GreaterThan

from jobs.models import EndOrNever, Pod, PodKind
from jobs.states import PodSubStatus

SOURCES = {PodKind.GUARANTEED: "guaranteed", PodKind.IDLE: "idle", PodKind.SPOT: "spot", PodKind.PAYG: "public"}
PERCENTILES = (50, 95)


class Epoch(Func):
    """Seconds since 1970 of a datetime, as a float, on SQLite (text datetimes) and PostgreSQL."""

    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)",
                           **extra)

    def as_postgresql(self, compiler, connection, **extra):
        # date_part, not EXTRACT: since PostgreSQL 14 EXTRACT computes a numeric, slow over the
        # tens of thousands of pod rows a sum reads; date_part gives the float8 itself.
        return self.as_sql(compiler, connection, template="date_part('epoch', %(expressions)s)", **extra)


@dataclass(frozen=True)
class GpuUse:
    """GPU-seconds of the pods of one (workspace, quota, user, source) in the range."""

    workspace_id: int
    quota_id: int | None
    user_id: int
    source: str
    gpu_seconds: float


def gpu_use(jobs, start: datetime, end: datetime, now: datetime) -> list[GpuUse]:
    """The GPU-seconds of the pods of `jobs` (a Job queryset) in [start, end), per group."""
    at = lambda moment: Value(moment, output_field=DateTimeField())  # noqa: E731
    ran_from = Greatest(F("pods__started_at"), at(start))
    ran_to = Least(Coalesce(F("pods__finished_at"), at(now)), at(end))
    # From the jobs to their pods in one join (one filter() call: the same pod meets every condition),
    # not pods whose job is in `jobs`: that semi-join read the jobs table twice.
    rows = (
        jobs.filter(GreaterThan(EndOrNever("pods__finished_at"), start), pods__gpu__gt=0,
                    pods__started_at__lt=min(end, now))
        .values("workspace", "quota", "user", "pods__kind")
        .annotate(seconds=Sum(F("pods__gpu") * (Epoch(ran_to) - Epoch(ran_from)), output_field=FloatField()))
        .order_by()
    )
    return [GpuUse(r["workspace"], r["quota"], r["user"], SOURCES.get(r["pods__kind"], "guaranteed"),
                   r["seconds"]) for r in rows if r["seconds"] > 0]


@dataclass(frozen=True)
class QueueTimes:
    """How long the jobs of one quota (None: the public pool's spot and pay-as-you-go jobs) queued."""

    jobs: int
    p50_s: float
    p95_s: float


def queue_times(jobs, start: datetime, end: datetime) -> dict[int | None, QueueTimes]:
    """Per quota, the p50 and p95 queueing time of the jobs whose first Running is in [start, end)."""
    # The wait as a duration, not seconds: ranking on it needs no conversion of every row's times.
    # No tie-break by pk: equal waits give the same figure, and without the pk the job rows are read
    # from job_running_covering alone.
    waited = jobs.filter(running_at__gte=start, running_at__lt=end).order_by().annotate(
        wait=ExpressionWrapper(F("running_at") - Coalesce(F("submitted_at"), F("created_at")),
                               output_field=DurationField()),
        rank=Window(RowNumber(), partition_by=[F("quota")], order_by=[F("wait").asc()]),
        n=Window(Count("*"), partition_by=[F("quota")]),
    )
    # The nearest rank ceil(p*n/100), in integers so that no float rounding picks a neighbour.
    ranks = {p: (F("n") * p + 99) / 100 for p in PERCENTILES}
    picked = waited.filter(Q(rank=ranks[50]) | Q(rank=ranks[95])).values_list("quota", "rank", "n", "wait")
    found: dict[int | None, dict] = {}
    for quota, rank, n, wait in picked:
        entry = found.setdefault(quota, {"n": n})
        for p in PERCENTILES:
            if rank == (n * p + 99) // 100:
                entry[p] = wait.total_seconds()
    return {quota: QueueTimes(e["n"], e[50], e[95]) for quota, e in found.items()}


@dataclass(frozen=True)
class Preemptions:
    """The pods of one quota's jobs (None: spot and public jobs) evicted for one reason in the range."""

    quota_id: int | None
    reason: str  # the stop reason: Preempted, SpotReleased or NodeDrained
    pods: int
    jobs: int
    lost_gpu_seconds: float


def preemptions(jobs, start: datetime, end: datetime) -> list[Preemptions]:
    """Evicted pods of `jobs` that ended in [start, end), per (quota, reason), with the work they lost."""
    checkpoint = F("last_checkpoint_at")
    since = Case(When(Q(last_checkpoint_at__gt=F("pods__started_at"), last_checkpoint_at__lte=F("pods__finished_at")),
                      then=checkpoint), default=Coalesce(F("pods__started_at"), F("pods__finished_at")))
    # From the jobs to their evicted pods in one join, as gpu_use.
    rows = (
        jobs.filter(pods__sub_status=PodSubStatus.EVICTED, pods__finished_at__gte=start, pods__finished_at__lt=end)
        .values("quota", "pods__reason_code")
        .annotate(lost=Sum(F("pods__gpu") * (Epoch(F("pods__finished_at")) - Epoch(since)), output_field=FloatField()),
                  evicted=Count("pods"), evicted_jobs=Count("pk", distinct=True))
        .order_by()
    )
    return [Preemptions(r["quota"], r["pods__reason_code"], r["evicted"], r["evicted_jobs"], r["lost"] or 0.0)
            for r in rows]

