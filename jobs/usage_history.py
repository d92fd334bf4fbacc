"""What jobs used over a past range [start, end): GPU-seconds by workspace, quota, user and source,
the time jobs queued per quota (p50 / p95), and preemptions with the GPU-seconds they cost.

Every figure is summed by the database in one query, whatever the number of jobs (the Usage page
reads them over ranges of 100,000 jobs). jobs.usage is the other account, of what pods hold now.

- A pod runs from `started_at` to `finished_at` (still running: to `now`); its GPU-seconds in the
  range are `gpu` x the overlap of that interval with [start, end). Every incarnation counts.
  Ranges of GPU-seconds are whole UTC days: a finished pod's seconds are rolled up per day into
  GpuDayUse (`roll_up`, every minute), so that a range sums those few rows, and only the pods
  not rolled up yet (running, or just finished) one by one.
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

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.db import connections, transaction
from django.db.models import (
    Aggregate, Case, Count, ExpressionWrapper, F, FloatField, Func, Q, Sum, Value, When, Window,
)
from django.db.models.fields import DateTimeField, DurationField
from django.db.models.functions import Coalesce, Greatest, Least, RowNumber
from django.db.models.lookups import GreaterThan

from jobs.models import EndOrNever, GpuDayUse, Job, Pod, PodKind
from jobs.states import PodSubStatus

SOURCES = {PodKind.GUARANTEED: "guaranteed", PodKind.IDLE: "idle", PodKind.SPOT: "spot", PodKind.PAYG: "public"}
PERCENTILES = (50, 95)
ROLL_UP_BATCH = 5_000
RESIDUE_S = 1e-3  # GPU-seconds: below a millisecond a row is float rounding, not use


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


def gpu_use(who: Q, first: date, last: date, now: datetime) -> list[GpuUse]:
    """The GPU-seconds, on the UTC days `first` to `last`, of the pods of the jobs `who` selects (a
    usage scope's rule, quotas.services.UsageScope), per group: the rolled-up days plus the pods
    not rolled up yet."""
    start, end = midnight(first), midnight(last + timedelta(days=1))
    sums: dict[tuple, float] = defaultdict(float)
    rolled = (GpuDayUse.objects.filter(who, day__gte=first, day__lte=last)
              .values_list("workspace", "quota", "user", "kind").annotate(seconds=Sum("gpu_seconds")).order_by())
    at = lambda moment: Value(moment, output_field=DateTimeField())  # noqa: E731
    ran_from = Greatest(F("pods__started_at"), at(start))
    ran_to = Least(Coalesce(F("pods__finished_at"), at(now)), at(end))
    # From the jobs to their pods in one join (one filter() call: the same pod meets every condition),
    # not pods whose job is in `jobs`: that semi-join read the jobs table twice.
    live = (
        Job.objects.filter(who)
        .filter(GreaterThan(EndOrNever("pods__finished_at"), start), pods__rolled_up=False, pods__gpu__gt=0,
                pods__started_at__lt=min(end, now))
        .values_list("workspace", "quota", "user", "pods__kind")
        .annotate(seconds=Sum(F("pods__gpu") * (Epoch(ran_to) - Epoch(ran_from)), output_field=FloatField()))
        .order_by()
    )
    for workspace, quota, user, kind, seconds in [*rolled, *live]:
        sums[workspace, quota, user, SOURCES.get(kind, "guaranteed")] += seconds
    return [GpuUse(*key, seconds) for key, seconds in sums.items() if seconds > 0]


def midnight(day: date) -> datetime:
    """The UTC day's start: usage ranges and roll-ups are whole UTC days."""
    return datetime.combine(day, time.min, tzinfo=UTC)


def roll_up(batch: int = ROLL_UP_BATCH) -> int:
    """Add the GPU-seconds of the finished pods not rolled up yet to GpuDayUse, split at UTC midnights,
    and mark them rolled up; `batch` pods per transaction until none is left. Returns how many pods.

    A pod another transaction holds is skipped (it is rolled up next time), so that two roll-ups
    never count one pod twice and no writer waits on this one."""
    done = 0
    while True:
        with transaction.atomic():
            pods = list(Pod.objects.filter(rolled_up=False, finished_at__isnull=False)
                        .select_for_update(of=("self",), skip_locked=True).order_by("pk")
                        .values_list("pk", *USE_FIELDS)[:batch])
            if not pods:
                return done
            _add(day_use(pod[1:] for pod in pods))
            Pod.objects.filter(pk__in=[pod[0] for pod in pods]).update(rolled_up=True)
        done += len(pods)


def forget(job) -> None:
    """Take the job's rolled-up pods back out of GpuDayUse, in the transaction that deletes the job (which
    holds its row): the Usage page sums the jobs there are, in GpuDayUse as in its other tables."""
    pods = Pod.objects.filter(job=job, rolled_up=True).locked().values_list(*USE_FIELDS)
    _add({key: -seconds for key, seconds in day_use(pods).items()})


# What a pod's use is summed by, and from: its job's scope fields and its own kind, GPUs and run.
USE_FIELDS = ("job__workspace", "job__quota", "job__user", "job__accessibility", "kind", "gpu", "started_at",
              "finished_at")
DAY_USE_KEY = ("day", "workspace_id", "quota_id", "user_id", "accessibility", "kind")


def day_use(pods) -> dict[tuple, float]:
    """GPU-seconds per (day, workspace, quota, user, accessibility, kind) of pods given as USE_FIELDS."""
    sums: dict[tuple, float] = defaultdict(float)
    for workspace, quota, user, accessibility, kind, gpu, started, finished in pods:
        if not gpu or started is None or finished is None:
            continue
        moment, finished = started.astimezone(UTC), finished.astimezone(UTC)
        while moment < finished:
            upto = min(midnight(moment.date() + timedelta(days=1)), finished)
            sums[moment.date(), workspace, quota, user, accessibility, kind] += gpu * (upto - moment).total_seconds()
            moment = upto
    return sums


def _add(sums: dict[tuple, float]) -> None:
    """Add `sums` (day_use's) into GpuDayUse: to a row of the key where there is one, else a new row."""
    if not sums:
        return
    # Locked in pk order, so that two writers adding to the same rows cannot deadlock.
    rows: dict[tuple, GpuDayUse] = {}
    folded = []
    for row in GpuDayUse.objects.filter(day__in={key[0] for key in sums}).select_for_update().order_by("pk"):
        key = tuple(getattr(row, f) for f in DAY_USE_KEY)
        if (first := rows.setdefault(key, row)) is not row and key in sums:
            # Two roll-ups at once each added a row of the key: one row again, so that forget()
            # takes from the whole of it.
            first.gpu_seconds += row.gpu_seconds
            folded.append(row.pk)
    changed, new = [], []
    for key, seconds in sums.items():
        if (row := rows.get(key)) is not None:
            row.gpu_seconds += seconds
            changed.append(row)
        else:
            new.append(GpuDayUse(**dict(zip(DAY_USE_KEY, key)), gpu_seconds=seconds))
    # A row that forget() brought back to (about) nothing goes, rather than stay as a rounding residue.
    GpuDayUse.objects.filter(pk__in=[*folded, *(r.pk for r in changed if r.gpu_seconds < RESIDUE_S)]).delete()
    GpuDayUse.objects.bulk_update([r for r in changed if r.gpu_seconds >= RESIDUE_S], ["gpu_seconds"])
    GpuDayUse.objects.bulk_create([r for r in new if r.gpu_seconds >= RESIDUE_S])


@dataclass(frozen=True)
class QueueTimes:
    """How long the jobs of one quota (None: the public pool's spot and pay-as-you-go jobs) queued."""

    jobs: int
    p50_s: float
    p95_s: float


class NearestRank(Aggregate):
    """The nearest-rank percentile of an expression: PostgreSQL's percentile_disc, the first value whose
    rank r among the n sorted has r/n >= p, that is the ceil(p*n)-th."""

    function = "percentile_disc"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, percent: int, **extra):
        super().__init__(expression, fraction=str(percent / 100), **extra)


def queue_times(jobs, start: datetime, end: datetime) -> dict[int | None, QueueTimes]:
    """Per quota, the p50 and p95 queueing time of the jobs whose first Running is in [start, end)."""
    # The wait as a duration, not seconds: ranking on it needs no conversion of every row's times.
    ran = jobs.filter(running_at__gte=start, running_at__lt=end).order_by()
    wait = ExpressionWrapper(F("running_at") - Coalesce(F("submitted_at"), F("created_at")),
                             output_field=DurationField())
    if connections[jobs.db].vendor == "postgresql":
        # An ordered-set aggregate sorts each quota's waits once and ranks them as it goes; SQLite
        # has none, so there the window functions below rank every row and a filter picks two.
        rows = ran.values("quota").annotate(n=Count("*"), **{f"p{p}": NearestRank(wait, p) for p in PERCENTILES})
        return {r["quota"]: QueueTimes(r["n"], r["p50"].total_seconds(), r["p95"].total_seconds()) for r in rows}
    # No tie-break by pk: equal waits give the same figure.
    waited = ran.annotate(
        wait=wait,
        rank=Window(RowNumber(), partition_by=[F("quota")], order_by=[F("wait").asc()]),
        n=Window(Count("*"), partition_by=[F("quota")]),
    )
    # The nearest rank ceil(p*n/100), in integers so that no float rounding picks a neighbour.
    ranks = {p: (F("n") * p + 99) / 100 for p in PERCENTILES}
    picked = waited.filter(Q(rank=ranks[50]) | Q(rank=ranks[95])).values_list("quota", "rank", "n", "wait")
    found: dict[int | None, dict] = {}
    for quota, rank, n, wait_ in picked:
        entry = found.setdefault(quota, {"n": n})
        for p in PERCENTILES:
            if rank == (n * p + 99) // 100:
                entry[p] = wait_.total_seconds()
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

