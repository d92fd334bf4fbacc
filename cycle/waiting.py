"""The waiting jobs as the schedule cycle sees them, kept by the scheduler process between cycles.

Reading every waiting job in full and rewriting every wait reason each cycle cost most of a cycle
once thousands of jobs waited (figures: docs/performance.md), so a cycle:

  * reads the waiting jobs' (pk, job id, modified_at) only, and the details (roles, pods, the
    time of the latest restart) of just the jobs it has not seen at that version. A waiting job
    changes only through a save, which moves modified_at: a requeue (new pods, a restart), a new
    priority. A job that left the queue and came back has a new modified_at too. On PostgreSQL
    it reads even those versions only of the jobs written since its last read (_changes_since:
    a trigger stamps each row with its writer's transaction id), not of the whole backlog.
  * writes a job's wait reason and queue position only when they changed since what this
    process wrote (remembered once the cycle commits): a new job or a new reason code at once;
    a new position at the head of its queue (the first POSITIONS_EXACT) at most every
    HEAD_MOVES_EVERY_S, since each admission moves every position behind it; any other change
    (a deeper position, new numbers in the same reason) at the next refresh, every
    POSITIONS_REFRESH_S. The refresh compares with the stored rows themselves, so it also repairs
    what another scheduler process or a rolled-back cycle left behind. Kueue, for comparison,
    publishes the first 10 pending workloads of a queue every 5 s (QueueVisibility maxCount,
    updateIntervalSeconds).
  * spreads a refresh over cycles: each cycle refreshes the next REFRESH_CHUNK waiting jobs (in
    pk order) until all have been, so that no one cycle reads and rewrites every waiting row.
    And the refresh writes a deep position only once it moved by more than a tenth
    (POSITIONS_MOVED): jobs admitted ahead shift every position behind them, and "4,512th"
    against "4,480th" tells a user nothing that justifies rewriting thousands of rows.

  * plans only the head of each quota's queue, in the queue's order (priority, then submit
    time): its first QUEUE_DEPTH jobs, or an equal share of PLAN_BUDGET if that is more. The
    others are not in the snapshot, and get a wait reason and position from here. A cycle's
    length is the loop every freed node waits on, and planning the whole backlog made it grow
    with the backlog. Slurm's main scheduler tests the first default_queue_depth=100 jobs a pass;
    Kueue takes each queue's head. The cost: a job deeper than that in its queue is not
    backfilled this cycle, even if it would fit; it is planned once it moves up. When a cycle
    admits every planned job of such a queue, the next cycle follows at once
    (ScheduleCycle.run_paced), so a free cluster still fills at the rate of back-to-back cycles.
    Spot and pay-as-you-go jobs are all planned (the market ranks every bid).

Everything is checked against the database each cycle, so nothing here can make a decision on
stale data: the memory only saves reading and writing what has not changed.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from operator import attrgetter
from typing import NamedTuple

from django.db import connection, transaction
from django.db.models import Max, TextField
from django.db.models.functions import Cast

import scheduler
from dbkit import bulk
from jobs.dispatch import RoleRun
from jobs.models import Job, JobSpec, Pod, Source, elastic_range
from jobs.states import WAITING, PodStatus
from scheduler.decisions import DEEP_IN_QUEUE, QUEUING
from scheduler.plan import job_order, queue_of

POSITIONS_EXACT = 10
HEAD_MOVES_EVERY_S = 2.0  # a position at the head that only moved is rewritten at most this often
POSITIONS_REFRESH_S = 10.0
REFRESH_CHUNK = 1000  # waiting jobs a cycle refreshes while a refresh is under way
POSITIONS_MOVED = 0.1  # a deep position is rewritten once it moved by more than this fraction
QUEUE_DEPTH = 100  # waiting jobs of each quota's queue that a cycle plans at least ...
PLAN_BUDGET = 2000  # ... or this many shared by the queues that have waiting jobs, if more
READ_CHUNK = 2000  # job pks per detail query (SQLite allows 32,766 parameters)
SOURCES = {Source.QUOTA: scheduler.SOURCE_QUOTA, Source.SPOT: scheduler.SOURCE_SPOT, Source.PUBLIC: scheduler.SOURCE_PAYG}


class _Stored(NamedTuple):
    """A job's wait reason code and queue position as this process last wrote them, and when."""

    code: str
    position: int
    at: datetime


class WaitingPod(NamedTuple):
    """An unplaced pod of a waiting job, as much as the cycle binds and starts it by."""

    pk: int
    pod_id: str
    incarnation: int
    cpu_m: int
    mem_mib: int
    gpu: int


@dataclass(eq=False)
class _Entry:
    pk: int
    version: tuple[str, str]  # (job id, modified_at as text): a reused pk cannot match
    job: scheduler.PendingJob | None  # None: no pod waits to be placed
    pods: dict[tuple[str, int], WaitingPod] = field(default_factory=dict)  # by (role, index)
    roles: tuple[RoleRun, ...] = ()  # in the job's order of roles
    stored: _Stored | None = None
    # The job's quota queue and its order in it (scheduler.plan.queue_of, job_order), once per
    # version: _Queues keeps every queue in this order. queue is None for a job that is not planned
    # by a quota queue (spot, pay-as-you-go; all of those are planned) or has nothing to place.
    queue: str | None = field(init=False, default=None)
    order: tuple = field(init=False, default=())

    def __post_init__(self):
        if self.job is not None and self.job.source == scheduler.SOURCE_QUOTA:
            self.queue, self.order = queue_of(self.job), job_order(self.job)


class WaitingJobs:
    """One per process that runs cycles (`scheduling.waiting_jobs`); cycles run one at a time (the
    cycle lock), the lock here only guards against a caller outside a cycle."""

    def __init__(self):
        self._entries: dict[int, _Entry] = {}
        self._by_job_id: dict[str, _Entry] = {}
        self._refreshed_at: datetime | None = None  # when the last refresh began
        self._to_refresh: list[int] = []  # pks the refresh under way has yet to reach, descending
        self._queues = _Queues()
        self._deeper: dict[str, list[_Entry]] = {}  # queue -> its entries past the depth, in order
        self._xmin: int | None = None  # PostgreSQL: every job written by an older transaction was read
        self._deletes: int | None = None  # PostgreSQL: jobs_job_deletes as of that read
        self._stored_at: datetime | None = None  # the now of the last store()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries, self._by_job_id, self._refreshed_at, self._to_refresh = {}, {}, None, []
            self._queues = _Queues()
            self._deeper, self._xmin, self._deletes, self._stored_at = {}, None, None, None

    # ---- reading ---------------------------------------------------------------------------

    def read(self) -> tuple[scheduler.PendingJob, ...]:
        """The pending jobs of the snapshot, in pk order: those with a pod waiting to be placed,
        but for the ones deeper in their quota's queue than a cycle plans (_Queues.window)."""
        with self._lock:
            changes = _changes_since(self._xmin) if self._xmin is not None else None
            if changes is None or not self._apply_changes(*changes):
                versions, self._xmin, self._deletes = _versions()
                self._apply_versions(versions)
            planned, self._deeper = self._queues.window()
            return planned

    def every_job(self) -> tuple[scheduler.PendingJob, ...]:
        """Every waiting job with a pod to place, as the last read() saw them, in pk order: the
        whole queue, where a cycle plans only its head."""
        with self._lock:
            return tuple(e.job for _, e in sorted(self._entries.items()) if e.job is not None)

    def _apply_versions(self, versions: dict[int, tuple[str, str]]) -> None:
        """Take every waiting job's version: keep the entries still current, read the others."""
        self._update([pk for pk, e in self._entries.items() if versions.get(pk) != e.version],
                     [pk for pk, version in versions.items() if pk not in self._entries
                      or self._entries[pk].version != version])

    def _apply_changes(self, rows: list[tuple[int, str, str, bool]], deletes: int, xmin: int) -> bool:
        """Take the versions of the jobs written since the last read (PostgreSQL); False, changing
        nothing, when jobs were deleted since (a delete leaves no row to read), so that read()
        reads every version instead."""
        if deletes != self._deletes:
            return False
        gone, fresh = [], []
        for pk, job_id, modified, is_waiting in rows:
            entry = self._entries.get(pk)
            if entry is not None and (not is_waiting or entry.version != (job_id, modified)):
                gone.append(pk)
            if is_waiting and (entry is None or entry.version != (job_id, modified)):
                fresh.append(pk)
        self._update(gone, fresh)
        self._xmin = xmin
        return True

    def _update(self, gone: list[int], fresh: list[int]) -> None:
        """Drop the entries of `gone`, add entries read afresh for `fresh`."""
        for pk in gone:
            entry = self._entries.pop(pk)
            self._queues.remove(entry)
            if self._by_job_id.get(entry.version[0]) is entry:
                del self._by_job_id[entry.version[0]]
        for chunk in _chunks(sorted(fresh)):
            for entry in _read_details(chunk):  # any order: window() sorts what it plans by pk
                self._entries[entry.pk] = entry
                self._queues.add(entry)
                self._by_job_id[entry.version[0]] = entry

    # ---- writing reasons and positions -------------------------------------------------------

    def store(self, waiting: tuple[scheduler.WaitReason, ...], now: datetime) -> None:
        """Write the wait reasons and positions that changed (see the module docstring)."""
        with self._lock:
            self._stored_at = now
            refresh = self._refresh_now(now)
            in_db = _stored_rows(sorted(refresh))
            entries = [(self._by_job_id.get(w.job_id), w) for w in waiting]  # all from this cycle's read()
            entries += self._deeper_reasons(waiting, refresh)
            rows, written = [], []
            for entry, w in entries:
                if entry is None:
                    continue
                refreshed = entry.pk in refresh
                if refreshed:
                    stored = in_db.get(entry.pk)
                    write = stored is None or stored[0] != w.message or _moved(stored[1], w.position)
                else:
                    old = entry.stored
                    write = old is None or old.code != w.code or (
                        old.position != w.position and min(old.position, w.position) <= POSITIONS_EXACT
                        and not timedelta(0) <= now - old.at < timedelta(seconds=HEAD_MOVES_EVERY_S))
                if write:
                    rows.append((w.message, w.code, w.position, entry.pk))
                if write or refreshed:
                    at = now if write or entry.stored is None else entry.stored.at
                    written.append((entry, _Stored(w.code, w.position, at)))
            # Only these columns, and only while the job still waits (the status test is part
            # of the update): a job stopped meanwhile keeps no stale reason.
            statuses = tuple(str(w) for w in WAITING)
            bulk.update_many(Job, ("wait_reason", "wait_reason_code", "queue_position"), ("id",), rows,
                             extra_where=f"status IN ({', '.join(['%s'] * len(statuses))})",
                             extra_params=statuses)
            transaction.on_commit(lambda: _remember(written))

    def stored_within(self, now: datetime, seconds: float) -> bool:
        """Whether store() ran less than `seconds` before now (not if the clock went back)."""
        return self._stored_at is not None and timedelta(0) <= now - self._stored_at < timedelta(seconds=seconds)

    def window_admitted(self, decisions: scheduler.Decisions) -> bool:
        """Whether the cycle admitted every job it planned of some queue that has jobs behind them."""
        waiting = {w.queue for w in decisions.waiting}
        return any(queue not in waiting for queue in self._deeper)

    def _deeper_reasons(self, planned: tuple[scheduler.WaitReason, ...], refresh: set[int]
                        ) -> list[tuple[_Entry, scheduler.WaitReason]]:
        """Reasons for the jobs read() left out: behind the planned ones still waiting in the queue.
        The message names no count, so that only the position (see store) changes as they move up.

        Only for the jobs store() may write: one that already has this reason at a position past
        POSITIONS_EXACT, and is not being refreshed, keeps it: building every deep job's reason
        each cycle, to write almost none, cost a long backlog's scheduler dearly."""
        ahead = Counter(w.queue for w in planned)
        reasons = []
        for queue, entries in self._deeper.items():
            for position, entry in enumerate(entries, ahead[queue] + 1):
                old, job = entry.stored, entry.job
                if (old is not None and old.code == DEEP_IN_QUEUE and min(old.position, position) > POSITIONS_EXACT
                        and entry.pk not in refresh):
                    continue
                reasons.append((entry, scheduler.WaitReason(
                    job.job_id, QUEUING, DEEP_IN_QUEUE,
                    f"Waiting in the queue of quota {job.quota_id}, behind the jobs each schedule cycle "
                    "considers first (the head of every queue); it is considered as it moves up",
                    queue, position)))
        return reasons

    def _refresh_now(self, now: datetime) -> set[int]:
        """The pks this cycle refreshes: the next REFRESH_CHUNK of the refresh under way, which
        begins every POSITIONS_REFRESH_S (or at once if the clock went back)."""
        due = (self._refreshed_at is None
               or not timedelta(0) <= now - self._refreshed_at < timedelta(seconds=POSITIONS_REFRESH_S))
        if due and not self._to_refresh:
            self._to_refresh, self._refreshed_at = sorted(self._entries, reverse=True), now
        chunk = set()
        while self._to_refresh and len(chunk) < REFRESH_CHUNK:
            pk = self._to_refresh.pop()
            if pk in self._entries:  # still waiting
                chunk.add(pk)
        return chunk

    def pod_pks(self, job_id: str) -> dict[tuple[str, int], int]:
        """(role, index) -> pk of the job's unplaced pods, as the last read() saw them."""
        return {key: pod.pk for key, pod in self.unplaced(job_id)[0].items()}

    def queued_since(self, job_id: str) -> datetime:
        """When the job joined its queue, as the cycle orders it: its submission, or its latest restart."""
        return self._by_job_id[job_id].job.submitted_at

    def unplaced(self, job_id: str) -> tuple[dict[tuple[str, int], WaitingPod], tuple[tuple[str, str], ...]]:
        """The job's unplaced pods by (role, index), and its roles with their commands, as the last
        read() saw them: what the cycle binds (the bind checks that each pod is still current and
        unplaced) and starts, without reading them again."""
        entry = self._by_job_id.get(job_id)
        return (entry.pods, entry.roles) if entry is not None else ({}, ())


class _Queues:
    """The waiting entries that have a job: per quota queue, kept in the queue's order
    (scheduler.plan.job_order) as entries come and go, and the others (spot, pay-as-you-go), which
    are all planned. Kept sorted, because a cycle adds and removes a few hundred entries while
    sorting a long backlog afresh each cycle costs far more."""

    def __init__(self):
        self.queues: dict[str, list[_Entry]] = {}
        self.others: dict[int, _Entry] = {}

    def add(self, entry: _Entry) -> None:
        if entry.queue is not None:
            bisect.insort(self.queues.setdefault(entry.queue, []), entry, key=_ORDER)
        elif entry.job is not None:
            self.others[entry.pk] = entry

    def remove(self, entry: _Entry) -> None:
        if entry.queue is None:
            self.others.pop(entry.pk, None)
            return
        queued = self.queues[entry.queue]
        del queued[bisect.bisect_left(queued, entry.order, key=_ORDER)]  # orders are unique: they end with the job id
        if not queued:
            del self.queues[entry.queue]

    def window(self) -> tuple[tuple[scheduler.PendingJob, ...], dict[str, list[_Entry]]]:
        """The jobs to plan, in pk order, and per quota queue the entries past its depth, in order:
        QUEUE_DEPTH, or an equal share of PLAN_BUDGET if that is more (a single long queue on a
        large cluster still admits thousands a cycle)."""
        depth = plan_depth(len(self.queues))
        planned = [entry for queued in self.queues.values() for entry in queued[:depth]]
        planned += self.others.values()
        planned.sort(key=_PK)
        return (tuple(entry.job for entry in planned),
                {name: queued[depth:] for name, queued in self.queues.items() if len(queued) > depth})


def plan_depth(queues: int) -> int:
    """How many jobs of each quota queue a cycle plans, when `queues` quota queues have jobs waiting."""
    return max(QUEUE_DEPTH, PLAN_BUDGET // max(1, queues))


_ORDER = attrgetter("order")
_PK = attrgetter("pk")


def _versions() -> tuple[dict[int, tuple[str, str]], int | None, int | None]:
    """pk -> (job id, modified_at as text) of every waiting job, and on PostgreSQL the xmin of the
    statement's snapshot and the count of job deletes (see _changes_since). In SQL (the same every
    time) rather than built by the ORM, and modified_at as text, which PostgreSQL formats faster
    than psycopg parses timestamps (SQLite keeps its text as it is)."""
    q, waiting = connection.ops.quote_name, _WAITING_SQL
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute(f"SELECT {q('id')}, {q('job_id')}, CAST({q('modified_at')} AS text) "
                           f"FROM {q(Job._meta.db_table)} WHERE {q('status')} IN {waiting}")
            return {pk: (job_id, modified) for pk, job_id, modified in cursor.fetchall()}, None, None
        cursor.execute(f"SELECT s.xmin, s.deletes, j.id, j.job_id, CAST(j.modified_at AS text) FROM ({_SINCE_SQL}) s "
                       f"LEFT JOIN {q(Job._meta.db_table)} j ON j.status IN {waiting}")
        rows = cursor.fetchall()
        return {pk: (job_id, modified) for _, _, pk, job_id, modified in rows if pk is not None}, *rows[0][:2]


def _changes_since(xmin: int) -> tuple[list[tuple[int, str, str, bool]], int, int]:
    """PostgreSQL: the jobs written by every transaction not finished when the snapshot of the
    last read was taken (its xmin) or begun since, as (pk, job id, modified_at, whether it
    waits); the count of job deletes; this snapshot's xmin. All from one statement, so from one
    snapshot.

    A trigger stores in jobs_job.change_xid the id of the transaction that last changed the row's
    status or modified_at (migration 0007). A transaction with an id below a snapshot's xmin had
    finished when the snapshot was taken, so what it wrote was read then; anything written since,
    or by a transaction still open then, has an id of at least that xmin, whenever it commits. A
    timestamp watermark (modified_at) has no such guarantee: a row is stamped before its
    transaction commits. Another trigger counts the statements that delete jobs, which leave no
    row behind. Reading every waiting job's version each cycle instead was most of a long
    backlog's snapshot."""
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        # The upper bound leaves out nothing visible (a transaction at or past the snapshot's xmax,
        # but this one, is not visible to it) and lets a generic plan use the index: psycopg
        # prepares a statement run five times, and PostgreSQL's generic plan for an open-ended
        # `>= $1` scanned the whole table.
        cursor.execute(f"SELECT s.xmin, s.deletes, j.id, j.job_id, CAST(j.modified_at AS text), j.status IN {_WAITING_SQL} "
                       f"FROM ({_SINCE_SQL}) s LEFT JOIN {q(Job._meta.db_table)} j ON j.change_xid >= %s "
                       "AND j.change_xid <= GREATEST(pg_snapshot_xmax(pg_current_snapshot()), "
                       "pg_current_xact_id_if_assigned())::text::bigint", [xmin])
        rows = cursor.fetchall()
    this_xmin, deletes = rows[0][:2]  # the same in every row
    return [(pk, job_id, modified, waits) for _, _, pk, job_id, modified, waits in rows if pk is not None], \
        deletes, this_xmin


_WAITING_SQL = "(" + ", ".join(f"'{w}'" for w in sorted(WAITING)) + ")"  # constants: one statement text
_SINCE_SQL = ("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin, "
              "(SELECT deletes FROM jobs_job_deletes WHERE id = 1) AS deletes")


def _moved(stored: int | None, position: int) -> bool:
    """Whether a refresh rewrites the stored position: exact at the head, else a tenth."""
    if stored is None or min(stored, position) <= POSITIONS_EXACT:
        return stored != position
    return abs(position - stored) > POSITIONS_MOVED * stored


def _remember(written: list[tuple[_Entry, _Stored]]) -> None:
    for entry, stored in written:
        entry.stored = stored


def _chunks(pks: list[int]) -> list[list[int]]:
    return [pks[i:i + READ_CHUNK] for i in range(0, len(pks), READ_CHUNK)]


def _stored_rows(pks: list[int]) -> dict[int, tuple[str, int | None]]:
    found = {}
    for chunk in _chunks(pks):
        found.update((pk, (reason, position)) for pk, reason, position in Job.objects.filter(
            pk__in=chunk, status__in=WAITING).order_by().values_list("pk", "wait_reason", "queue_position"))
    return found


def _read_details(pks: list[int]) -> list[_Entry]:
    """Entries for these waiting jobs: their rows, roles and unplaced pods (values, not models)."""
    # A job AIMaster re-queued takes its place by the time of its latest restart, not its submit
    # time (Kueue's eviction timestamp): else a preempted borrower, older than the lender's job
    # that reclaimed its node, would take the freed node straight back and be preempted again.
    jobs = Job.objects.filter(pk__in=pks, status__in=WAITING).order_by().annotate(
        requeued_at=Max("restarts__at"), modified=Cast("modified_at", TextField())).values_list(
        "pk", "job_id", "modified", "requeued_at", "submitted_at", "created_at", "quota__name", "workspace_id",
        "oversold_type", "priority", "source", "max_running_time_minutes", "elastic_spec", named=True)
    specs: dict[int, dict[str, tuple[str, Decimal | None]]] = defaultdict(dict)
    roles: dict[int, list[RoleRun]] = defaultdict(list)
    for job, role, itype, limit, discount, on_demand, *run in JobSpec.objects.filter(job_id__in=pks).order_by(
            "pk").values_list("job_id", "role", "spec__instance_type", "spot_price_limit", "spot_discount_limit",
                              "spec__on_demand_price_per_minute", "command", "image", "image_config"):
        specs[job][role] = (itype, JobSpec.bid(limit, discount, on_demand))
        roles[job].append(RoleRun(role, *run))
    pods: dict[int, list[scheduler.PodRequest]] = defaultdict(list)
    unplaced: dict[int, dict[tuple[str, int], WaitingPod]] = defaultdict(dict)
    for pk, job, role, index, gpu, cpu_m, mem_mib, pod_id, incarnation in Pod.objects.filter(
            job_id__in=pks, current=True, node__isnull=True, status=PodStatus.PENDING,
    ).order_by("role", "index").values_list("pk", "job_id", "role", "index", "gpu", "cpu_m", "mem_mib", "pod_id",
                                            "incarnation"):
        itype = specs[job][role][0] if role in specs[job] else None
        pods[job].append(scheduler.PodRequest(role, index, scheduler.Resources(gpu, cpu_m, mem_mib), itype))
        unplaced[job][role, index] = WaitingPod(pk, pod_id, incarnation, cpu_m, mem_mib, gpu)
    return [_Entry(row.pk, (row.job_id, row.modified),
                   _pending_job(row, specs[row.pk], pods[row.pk]) if pods[row.pk] else None,
                   unplaced[row.pk], tuple(roles[row.pk]))
            for row in jobs]


def _pending_job(row, specs: dict[str, tuple[str, Decimal | None]], pods: list[scheduler.PodRequest]
                 ) -> scheduler.PendingJob:
    bids = [bid for _, bid in specs.values() if bid is not None]
    return scheduler.PendingJob(
        row.job_id, row.requeued_at or row.submitted_at or row.created_at, tuple(pods), row.quota__name,
        str(row.workspace_id), row.oversold_type, row.priority, SOURCES.get(row.source, scheduler.SOURCE_QUOTA),
        min(bids) if row.source == Source.SPOT and bids else None,  # the gang pays its lowest bid
        timedelta(minutes=row.max_running_time_minutes) if row.max_running_time_minutes else None,
        # Elastic: its first MinParallelism workers (by index) are the gang (scheduler/elastic.py).
        min_pods=(elastic_range(row.elastic_spec) or (0,))[0],
    )
