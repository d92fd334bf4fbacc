"""The schedule cycle against the database: snapshot -> scheduler.plan -> apply -> dispatch.

    1. Serialize: one cycle at a time (PostgreSQL advisory transaction lock; SQLite's IMMEDIATE
       transaction), then read everything inside that transaction.
    2. Snapshot: Ready and not-ready nodes, the quota tree, pods holding capacity (bound, not yet
       reported finished), jobs waiting in Queuing/Bidding with their gangs (jobs/waiting.py keeps
       them between cycles and reads only what changed), market prices.
    3. plan(snapshot, now): pure, in scheduler/.
    4. Apply in the same transaction: preempt (pods terminating, "Resource Preempted" events),
       admit (bind pods to nodes and GPU indices, Queuing/Bidding -> EnvPreparing).
    5. After commit: stop and start messages to the agents (jobs/dispatch.py), then the waiting
       jobs' reasons and queue positions that changed (jobs/waiting.py), in a second transaction.

Cycles are requested with `request_cycle()` by every event that can change a decision, and run
by beat every OPENDLC_SCHEDULE_INTERVAL_S. Requests are coalesced: the first request since the
last cycle began sets a flag (Redis SET NX with REDIS_URL; in embedded mode, where everything runs
on one machine, a flag file created with O_EXCL) and sends one task; later requests see the flag
and send nothing. The task clears the flag as it starts, so a request made while a cycle runs gets
a cycle after it, once the task's rest is over (pacing, below): requests made meanwhile join that
cycle. A flag older than REQUEST_TTL_S counts as gone, in case its task was lost; beat repairs
anything else. No countdown on the task: a countdown of 0.05 s (to gather a burst of requests) was
0.1 s of the 0.3 s the platform took to give a lender back its nodes (bench/reclaim_latency.py),
and the rest gathers bursts on a busy machine already.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import time
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

import scheduler as s
from jobs import bulk, dispatch
from jobs.contention import Contention
from jobs.models import Job, JobEvent, JobSpec, Pod, Source
from jobs.states import WAITING, JobStatus
from jobs.waiting import WaitingJobs
from quotas.models import Node, NodeStatus, Quota, ResourceSpec
from scheduler.decisions import OUTBID, STOCK_SHORT
from spot.market_state import current_markets

log = logging.getLogger(__name__)

# Any constant works; it names the one lock every schedule cycle takes ("odlc").
CYCLE_LOCK_KEY = 0x6F646C63
REQUEST_TTL_S = 30
waiting_jobs = WaitingJobs()  # this process's view of the queue, kept between cycles
RELEASES = {OUTBID: dispatch.SPOT_RELEASED, STOCK_SHORT: dispatch.SPOT_RELEASED}  # else Preempted


# Pacing. A cycle costs time in proportion to the waiting jobs; run back to back on a busy machine
# they took most of a core from the reports, submissions and PostgreSQL they wait on. The
# scheduler task rests as long as its last cycle took (at most PACE_MAX_S) before the next one,
# times how short of CPU the other processes were meanwhile (jobs/contention.py): on a busy
# machine cycles use at most about half a core and each decides for more jobs at once; on one
# with CPU to spare the next binding does not wait out a rest that saves nothing.
PACE_MAX_S = 0.5
# While another cycle is already requested (a submission, a pod's end), a cycle leaves the waiting
# jobs' reasons to it, as long as they were written less than this long ago: in the Kueue
# baseline the scheduler runs cycle after cycle, and writing reasons was a fifth to a quarter of
# each (0.09 of 0.40 s while the backlog drained; 10 of 38 s while jobs were submitted), and with
# a limit of 1 s still 0.04-0.06 s of a 0.2 s cycle on average. So while the scheduler is that
# busy, reasons are at most 3 s old (Kueue publishes its pending workloads every 5 s). Nothing is
# lost: each write compares with what was last written.
REASONS_DEFER_MAX_S = 3.0
_rest_until = 0.0
contention = Contention()


def run_paced_cycle() -> s.Decisions:
    """The schedule task: rest (requests meanwhile join this cycle), then one cycle. A cycle that
    admitted every job it planned of a queue with more behind them (jobs/waiting.py QUEUE_DEPTH)
    is followed by the next at once, without a rest: those may fit too."""
    global _rest_until
    _rest(_rest_until - time.monotonic())
    clear_request()  # before reading: a request from now on gets its own cycle
    started = time.monotonic()
    decisions = None
    try:
        decisions = run_cycle(defer_reasons=_cycle_requested)
        return decisions
    finally:
        ended = time.monotonic()
        _rest_until = ended + min(PACE_MAX_S, ended - started) * contention.since_last()
        if decisions is not None and waiting_jobs.window_admitted(decisions):
            _rest_until = 0.0
            request_cycle()


def run_cycle(now=None, *, defer_reasons=None) -> s.Decisions:
    """One schedule cycle, applied in one transaction; messages go to the agents after commit.

    defer_reasons: a test, called once the cycle committed, of whether another cycle follows soon
    (the schedule task passes _cycle_requested). If one does and the waiting jobs' reasons were
    written less than REASONS_DEFER_MAX_S ago, this cycle leaves them to it (see store_wait_reasons).
    """
    t = [time.perf_counter()]
    with transaction.atomic():
        _serialize_cycles()
        t.append(time.perf_counter())
        cluster = read_cluster()
        # The clock after the reads: every job read was submitted before the cycle's now, so no pod
        # is bound (bound_at = now) before its job was submitted, however long the lock took.
        now = now or timezone.now()
        snapshot = dataclasses.replace(cluster, markets=_markets(now))
        t.append(time.perf_counter())
        decisions = s.plan(snapshot, now)
        t.append(time.perf_counter())
        dispatch.send_on_commit(apply(decisions, now))
        t.append(time.perf_counter())
    t.append(time.perf_counter())
    if not (defer_reasons is not None and waiting_jobs.stored_within(now, REASONS_DEFER_MAX_S) and defer_reasons()):
        store_wait_reasons(decisions, now)
    t.append(time.perf_counter())
    # INFO when it decided something, else DEBUG: beat's idle cycles every few seconds are noise.
    level = logging.INFO if decisions.admissions or decisions.preemptions else logging.DEBUG
    log.log(level, "cycle: %d waiting jobs planned, %d admitted, %d preempted in %.3f s (lock %.3f, snapshot %.3f, "
            "plan %.3f, apply %.3f, commit and send %.3f, wait reasons %.3f)", len(snapshot.jobs), len(decisions.admissions),
            len(decisions.preemptions), t[-1] - t[0], *(b - a for a, b in itertools.pairwise(t)))
    return decisions


def _serialize_cycles() -> None:
    if connection.vendor == "postgresql":
        # Held until this transaction ends. A second cycle waits here and only then reads its
        # snapshot, so it sees every binding the first one committed: no node is booked twice.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CYCLE_LOCK_KEY])
    # SQLite: the transaction began IMMEDIATE (console/config.py), which took the database's
    # write lock at BEGIN, so cycles (and every other writer) already run one at a time.


# ---- 2. snapshot ----------------------------------------------------------------------------


def read_cluster() -> s.Snapshot:
    """The snapshot without its markets, which are priced at the cycle's now (read after this)."""
    return s.Snapshot(nodes=_nodes(), quotas=_quotas(), pods=_running_pods(), jobs=waiting_jobs.read())


def build_snapshot(now) -> s.Snapshot:
    return dataclasses.replace(read_cluster(), markets=_markets(now))


# The snapshot reads values, not model instances: building tens of thousands of instances was
# most of a large cycle's snapshot time (bench/cycle_profile.py). The waiting jobs come from
# jobs/waiting.py, which reads only what changed since the last cycle.


def _nodes() -> tuple[s.Node, ...]:
    # Not-ready nodes are in the snapshot too (ready=False): their pods still hold capacity.
    specs = {spec.pk: (spec.instance_type, s.Resources(spec.gpu, spec.cpu_m, spec.memory_mib))
             for spec in ResourceSpec.objects.all()}
    return tuple(
        s.Node(name, *specs[spec], quota, ready=status == NodeStatus.READY)
        for name, spec, quota, status in Node.objects.order_by("name").values_list(
            "name", "spec_id", "quota__name", "status")
    )


def _quotas() -> tuple[s.Quota, ...]:
    # The scheduler knows a quota by its name (unique): its wait and preemption messages are read
    # by people ("Quota nlp-team is full", "reclaimed by quota cv-team").
    return tuple(
        s.Quota(name, str(tenant), parent, *rest)
        for name, tenant, parent, *rest in Quota.objects.order_by("pk").values_list(
            "name", "tenant_id", "parent__name", "resource_type", "queue_strategy", "allow_priority_preemption",
            "min_runtime_before_preemption_s")
    )


def _running_pods() -> tuple[s.RunningPod, ...]:
    with transaction.atomic(), _plain_index_scans():
        rows = list(_live_pods())
    bids = _role_bids({r[15] for r in rows if r[6] == s.KIND_SPOT})
    return tuple(_running_pod(r, bids.get((r[15], r[16]))) for r in rows)


def _live_pods():
    return Pod.objects.filter(node__isnull=False, status__in=dispatch.LIVE_STATUSES).order_by("pk").values_list(
        "pod_id", "job__job_id", "node__name", "gpu", "cpu_m", "mem_mib", "kind", "started_at", "bound_at",
        "created_at", "job__quota__name", "job__priority", "gpu_indices", "job__last_checkpoint_at", "terminating",
        "job_id", "role")


@contextmanager
def _plain_index_scans():
    """PostgreSQL: the statements inside read an index with a plain index scan, not a bitmap scan
    nor the whole table.

    The live pods' partial index (pod_live_bound) keeps the entry of a pod that has ended until
    VACUUM removes it; a plain index scan that finds such an entry's row dead to every
    transaction marks it dead (PostgreSQL's kill_prior_tuple), and later scans skip it, but a
    bitmap scan never marks anything. The planner picked the bitmap scan, so in
    bench/kueue_baseline.py the index grew to every pod run so far (16,600 entries for a few dozen
    live pods) and reading the live pods took 12-24 ms of each cycle; marked, it reads a few
    dozen entries (EXPLAIN ANALYZE: 12,657 buffers, then 49)."""
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


def _running_pod(row: tuple, bid: tuple[Decimal | None, int] | None) -> s.RunningPod:
    (pod_id, job_id, node, gpu, cpu_m, mem_mib, kind, started_at, bound_at, created_at, quota, priority,
     gpu_indices, checkpoint_at, terminating, _, _) = row
    started = started_at or bound_at or created_at
    protection = started + timedelta(hours=bid[1]) if bid else None
    return s.RunningPod(
        pod_id, job_id, node, s.Resources(gpu, cpu_m, mem_mib),
        kind or s.KIND_GUARANTEED,  # unknown kind: treat as never preemptible
        started, quota, priority, tuple(gpu_indices), checkpoint_at, terminating,
        bid[0] if bid else None, protection,
    )


def _role_bids(job_pks) -> dict[tuple[int, str], tuple[Decimal | None, int]]:
    """(job pk, role) -> (bid per node-minute, protection hours) for spot roles."""
    rows = JobSpec.objects.filter(job_id__in=job_pks).values_list(
        "job_id", "role", "spot_price_limit", "spot_discount_limit", "spec__on_demand_price_per_minute",
        "spot_duration_hours") if job_pks else []
    return {(job, role): (JobSpec.bid(limit, discount, on_demand), hours)
            for job, role, limit, discount, on_demand, hours in rows}


def _markets(now) -> tuple[s.MarketState, ...]:
    # spot.market_state owns the market: the price in force now and the last hour's average
    # weighted by how long each price held (the Lingjun release rule), per public pool.
    markets = current_markets(now)
    if not markets:
        return ()
    specs = dict(ResourceSpec.objects.values_list("instance_type", "resource_type"))
    return tuple(
        s.MarketState(instance_type, market.price, market.avg_last_hour, specs[instance_type])
        for instance_type, market in sorted(markets.items())
    )


# ---- 4. apply -------------------------------------------------------------------------------


def apply(decisions: s.Decisions, now) -> list[dispatch.Message]:
    """Carry out the decisions inside the cycle's transaction; returns the messages to send.

    Preemptions first, so that the stop messages go out before the start messages.
    """
    messages = _preempt_all(decisions.preemptions, now)
    messages += _admit_all(decisions.admissions, now)
    return messages


def store_wait_reasons(decisions: s.Decisions, now) -> None:
    """The waiting jobs' reasons and queue positions that changed (jobs/waiting.py), after the
    cycle's commit, so that the admitted pods' start messages do not wait on them: a third of a
    busy cycle's apply time (bench/kueue_baseline.py). A transaction of their own under the cycle
    lock, as every cycle's writes are. They are what the console shows of a waiting job and decide
    nothing: if this step is lost, the next refresh (jobs/waiting.py) writes them."""
    with transaction.atomic():
        _serialize_cycles()
        waiting_jobs.store(decisions.waiting, now)


def _preempt_all(preemptions: tuple[s.Preemption, ...], now) -> list[dispatch.Message]:
    """Stop the preempted pods ("Resource Preempted"), one job event each naming its pods."""
    if not preemptions:
        return []
    # Lock order for every writer (cycle, reports, stop): the job rows, then their pods. Touching
    # the pods first could deadlock with a pod report for one of these jobs holding its job row.
    jobs = {job_id: (pk, grace_s) for pk, job_id, grace_s in Job.objects.select_for_update().filter(
        job_id__in={p.job_id for p in preemptions}).order_by("pk").values_list("pk", "job_id", "termination_grace_s")}
    messages = dispatch.stop_many([
        dispatch.Stop(p.pod_id, RELEASES.get(p.reason.code, dispatch.PREEMPTED), p.reason.message, jobs[p.job_id][1])
        for p in preemptions], event="Resource Preempted")
    stopped = {m.payload["pod_id"] for m in messages}
    events = []
    for job_id, group in itertools.groupby(sorted(preemptions, key=lambda p: p.job_id), key=lambda p: p.job_id):
        group = list(group)
        names = [p.pod_id for p in group if p.pod_id in stopped]
        if names:
            reason = group[0].reason
            events.append(JobEvent(job_id=jobs[job_id][0], at=now, type=JobEvent.Type.WARNING,
                                   reason=RELEASES.get(reason.code, dispatch.PREEMPTED),
                                   message=f"Resource Preempted: {reason.message} (pods {', '.join(names)})"))
    JobEvent.objects.bulk_create(events)
    return messages


def _admit_all(admissions: tuple[s.Admission, ...], now) -> list[dispatch.Message]:
    """Bind the admitted jobs' pods and move the jobs to EnvPreparing, in a few statements.

    A cycle may admit thousands of jobs; a handful of queries per job (lock, bind, save, history,
    event, start messages) made applying them most of the cycle's time (see bench/).
    """
    if not admissions:
        return []
    # Lock the job rows (in pk order, like every writer) and re-check: a user may have stopped a
    # job since the snapshot was read. Only the fields the admission and the start messages use
    # (ADMIT_FIELDS): building all 41 of thousands of rows was a fifth of applying them.
    jobs = {j.job_id: j for j in Job.objects.select_for_update().filter(
        job_id__in=[a.job_id for a in admissions], status__in=WAITING).order_by("pk").only(*ADMIT_FIELDS)}
    admitted = [a for a in admissions if a.job_id in jobs]
    if not admitted:
        return []
    nodes = {name: (pk, hostname, executor) for name, pk, hostname, executor in Node.objects.filter(
        name__in={p.node for a in admitted for p in a.placements}).values_list("name", "pk", "hostname", "executor")}
    # By pod pk, as this cycle's snapshot read them (jobs/waiting.py): matching (job, role, index)
    # made PostgreSQL hash every unbound pod of the queue for each admission. The start messages are
    # built from the same reads: reading the bound pods and the roles back was a fifth of applying
    # a few hundred admissions (bench/cycle_profile.py).
    binds, starts = [], []
    for a in admitted:
        unplaced, roles = waiting_jobs.unplaced(a.job_id)
        pods = []
        for pl in a.placements:
            pod, (node, hostname, executor) = unplaced.get((pl.role, pl.index)), nodes[pl.node]
            if pod is None:
                raise RuntimeError(f"pod {pl.role} {pl.index} of {a.job_id} was not read waiting to be bound")
            binds.append((node, list(pl.gpu_indices), a.kind, now, pod.pk))
            pods.append(dispatch.BoundPod(pod.pod_id, pl.role, pl.index, pod.incarnation, list(pl.gpu_indices), pl.node,
                                          hostname, executor))
        starts.append((jobs[a.job_id], pods, roles))
    bound = bulk.update_many(Pod, ("node", "gpu_indices", "kind", "bound_at"), ("id",), binds,
                              extra_where='"current" AND "node_id" IS NULL')
    if bound != len(binds):  # the snapshot and the rows disagree: roll the whole cycle back
        raise RuntimeError(f"{len(binds) - bound} admitted pods were not waiting to be bound")
    transitions = []
    for a in admitted:
        job = jobs[a.job_id]
        transitions.append(bulk.transition(job, JobStatus.ENV_PREPARING, reason="JobAdmitted", message=_admitted(a),
                                           at=now))
        job.use_oversold_resource = a.use_oversold if job.source == Source.QUOTA else None
    bulk.update_many(Job, ("status", "reason_code", "reason_message", "use_oversold_resource", "wait_reason",
                           "queue_position", "modified_at"), ("id",),
                     [(j.status, j.reason_code, j.reason_message, j.use_oversold_resource, "", None, now, j.pk)
                      for j in (jobs[a.job_id] for a in admitted)])
    bulk.record(transitions)
    return [message for job, pods, roles in starts for message in dispatch.gang_start(job, pods, roles)]


# What _admit_all reads or writes of a job (bulk.transition, the start messages): another field
# would be read with a query per job (tests/jobs/test_scheduling.py counts them).
ADMIT_FIELDS = ("job_id", "status", "reason_code", "reason_message", "running_at", "finished_at", "source",
                "use_oversold_resource", "user_command", "envs", "termination_grace_s", "max_running_time_minutes")


def _admitted(a: s.Admission) -> str:
    where = ", ".join(sorted({p.node for p in a.placements}))
    label = {s.KIND_GUARANTEED: "In Quota", s.KIND_IDLE: "Not in Quota (idle resources, preemptible)",
             s.KIND_SPOT: "on preemptible resources", s.KIND_PAYG: "on public resources"}[a.kind]
    return f"Admitted {label} on {where}"


# ---- requesting cycles ------------------------------------------------------------------------


def request_cycle(freed: bool = False) -> None:
    """Ask for a schedule cycle soon. Inside a transaction the request is made when it commits,
    so a rolled-back change asks for nothing; bursts of requests lead to one cycle.

    freed: the change freed capacity (a pod ended), so the cycle should not wait out the
    schedule task's rest (_rest): a freed node idles until a cycle gives it a job, and in
    bench/kueue_baseline.py that wait was a large part of the 0.4 s gap between one large job
    and the next on a node. Other requests (a submission, a new priority) may wait for the rest: they join
    the cycle it ends with."""
    if freed:
        transaction.on_commit(_end_rest)
    transaction.on_commit(_request_now)


def _request_now() -> None:
    if not _claim_request():
        return  # a cycle is already on its way and will see this change
    from jobs.tasks import schedule

    schedule.apply_async(expires=REQUEST_TTL_S)


def _claim_request() -> bool:
    try:
        if settings.REDIS_URL:
            return bool(_redis().set(_FLAG_KEY, "1", nx=True, ex=REQUEST_TTL_S))
        return _claim_flag_file()
    except Exception:  # cannot coalesce: better one cycle too many than a missed one
        log.exception("could not coalesce the schedule request")
        return True


def _rest(seconds: float) -> None:
    """The schedule task's rest before its cycle (pacing, above), cut short by a request that
    freed capacity (request_cycle(freed=True)) with REDIS_URL; in embedded mode a plain sleep."""
    if seconds < 0.001:
        return
    if settings.REDIS_URL:
        try:
            _redis().blpop([_WAKE_KEY], timeout=seconds)
            return
        except Exception:  # Redis is down: the rest is still owed
            log.exception("could not wait on the schedule wake-up list")
    time.sleep(seconds)


def _cycle_requested() -> bool:
    """Whether another cycle was requested since this one began: it follows at once (capacity was
    freed: a wake-up waits) or after the task's rest (at most PACE_MAX_S)."""
    try:
        if settings.REDIS_URL:
            return _redis().exists(_FLAG_KEY, _WAKE_KEY) > 0
        return _flag_file().exists()
    except Exception:
        log.exception("could not read the schedule request flag")
        return False


def _end_rest() -> None:
    if not settings.REDIS_URL:
        return
    try:
        _redis().pipeline().rpush(_WAKE_KEY, 1).expire(_WAKE_KEY, REQUEST_TTL_S).execute()
    except Exception:  # only the rest is not cut short
        log.exception("could not wake the schedule task")


def clear_request() -> None:
    """Called by the schedule task as it starts: requests from now on need a new cycle, and a
    wake-up from before is spent (the cycle about to start sees what freed the capacity)."""
    try:
        if settings.REDIS_URL:
            _redis().delete(_FLAG_KEY, _WAKE_KEY)
        else:
            _flag_file().unlink(missing_ok=True)
    except Exception:
        log.exception("could not clear the schedule request flag")


_FLAG_KEY = "opendlc:schedule-requested"
_WAKE_KEY = "opendlc:schedule-wake"  # a list: BLPOP waits on it with a timeout
_redis_client = None


def _redis():
    global _redis_client
    if _redis_client is None:
        import redis

        _redis_client = redis.Redis.from_url(settings.REDIS_URL)
    return _redis_client


def _flag_file():
    return settings.VAR_DIR / "schedule-requested"


def _claim_flag_file() -> bool:
    path = _flag_file()
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # O_EXCL: one winner
        return True
    except FileExistsError:
        if time.time() - path.stat().st_mtime < REQUEST_TTL_S:
            return False
        os.utime(path)  # stale: its task was lost
        return True
