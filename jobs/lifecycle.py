"""Pod reports from the agents drive the job's states.

    pod Running    -> job Running once every pod of the gang runs (EnvPreparing -> Running)
    pod Succeeded  -> job Succeeded once every pod succeeded
    pod Failed     -> on_pod_failed: job Failed, its other pods stopped; with fault tolerance
                      AIMaster (jobs/aimaster.py) restarts the job instead, or fails it in its words
    pod ended while the job is Restarting -> AIMaster re-queues the job once no pod is left
    pod stopped for preemption -> ends Failed / Evicted ("Resource Preempted") with the stop's reason
    job Stopping   -> Stopped once no pod is left (Failed/MaxRunningTime for a max-running-time stop)

Reports are idempotent: each pod change is claimed with a conditional update
(`filter(status=...).update(...)` and a row-count check), so a duplicate or late report, or one
for an earlier incarnation, changes nothing about the job. Capacity is freed only here, when the
agent says the pod has finished.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import transaction
from django.db.models import DateTimeField, F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from prometheus_client import Histogram

from dbkit import bulk
from jobs import aimaster, dispatch, elastic, history
from jobs.cycle_requests import request_cycle
from jobs.dispatch import EVICTING_REASONS, live_pods
from jobs.models import Job, Pod, PodEvent, RestartRecord
from jobs.states import FINAL, LIVE_STATUSES, IllegalTransition, JobStatus, PodStatus, PodSubStatus

log = logging.getLogger(__name__)

FINISHED = (PodStatus.SUCCEEDED, PodStatus.FAILED)
RAN = (PodStatus.RUNNING, PodStatus.SUCCEEDED)  # a job runs once each current pod is (or was) running
STARTABLE = (PodStatus.PENDING, PodStatus.UNKNOWN)  # a Running report moves these to Running
MAX_RUNNING_TIME = "MaxRunningTime"
STOPPED_BY_USER = "StoppedByUser"
POD_START_SECONDS = Histogram("opendlc_pod_start_latency_seconds", "From a pod's binding to a node to the agent's first "
                              "Running report", buckets=(.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800))


@dataclass(frozen=True)
class Report:
    pod_id: str
    status: str
    exit_code: int | None
    at: datetime
    reason: str
    message: str
    started: datetime | None = None  # an end report: when the agent reported the pod started
    started_message: str = ""  # ... and that Running report's message

    @classmethod
    def parse(cls, raw: dict, now: datetime) -> Report:
        status = raw.get("status")
        if status not in (PodStatus.RUNNING, *FINISHED):
            raise ValueError(f"pod report status must be Running, Succeeded or Failed, got {status!r}")
        at = parse_time(raw.get("at")) or now
        started = parse_time(raw.get("started")) if status in FINISHED else None
        return cls(str(raw["pod_id"]), status, raw.get("exit_code"), at, str(raw.get("reason") or ""),
                   str(raw.get("message") or ""), min(started, at) if started else None,
                   str(raw.get("started_message") or "") if started else "")


def parse_time(value) -> datetime | None:
    if not value:
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is not None and timezone.is_naive(parsed):
        parsed = parsed.replace(tzinfo=dt_timezone.utc)
    return parsed


# ---- reports -------------------------------------------------------------------------------


REJECTED = (KeyError, TypeError, ValueError, IllegalTransition)


def apply_reports(reports: list[dict], now=None) -> int:
    """Apply a batch of pod reports in one transaction; returns how many changed a pod.

    The common reports (a pod of a preparing or running job runs, or succeeds) are applied for the
    whole batch in a few statements (`_Batch`); the rest one at a time with the same checks as
    alone. If any report is rejected, or a pod changed under the batch, the batch rolls back and is
    applied again one report per transaction, so that one malformed report does not drop the rest.
    Database errors are not caught: the task retries the batch, and reports already applied change
    nothing.
    """
    now = now or timezone.now()
    try:
        with transaction.atomic():
            return _apply_batch(reports, now)
    except (*REJECTED, _PodChanged):
        log.info("a pod report was rejected or raced; applying the batch one report at a time")
    changed = 0
    for raw in reports:
        try:
            with transaction.atomic():
                changed += apply_report(raw, now)
        except REJECTED:
            log.exception("pod report rejected: %r", raw)
    return changed


class _PodChanged(Exception):
    """A pod row changed between the batch's read and its write (e.g. the node-lost reaper)."""


def _apply_batch(reports: list[dict], now) -> int:
    parsed = [Report.parse(raw, now) for raw in reports]
    # Every job row of the batch is locked before their pods are read (JobQuerySet.locked).
    reported = Pod.objects.filter(pod_id__in={r.pod_id for r in parsed}).values("job_id")
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=reported).locked().only(*_Batch.JOB_FIELDS)}
    pods: dict[int, list[Pod]] = {pk: [] for pk in jobs}
    for pod in Pod.objects.select_related("node").filter(job_id__in=jobs).only(*_Batch.POD_FIELDS):
        pods[pod.job_id].append(pod)
    found = {pod.pod_id: job for job, job_pods in pods.items() for pod in job_pods}
    by_job: dict[int, list[Report]] = {}
    for report in parsed:
        if report.pod_id in found:
            by_job.setdefault(found[report.pod_id], []).append(report)
        else:
            log.warning("pod report for unknown pod %s", report.pod_id)
    batch, slow = _Batch(), []
    for job_pk, job_reports in by_job.items():
        job, job_pods = jobs[job_pk], pods[job_pk]
        if _Batch.takes(job, job_pods, job_reports):
            batch.apply(job, job_pods, job_reports)
        elif _Batch.requeues(job, job_pods, job_reports):
            batch.requeue(job, job_pods, job_reports)
        else:
            slow.append(job_pk)
    changed = batch.write()
    for job_pk in slow:  # failures, stops, restarts: one report at a time, each reading fresh rows
        for report in by_job[job_pk]:
            job = Job.objects.get(pk=job_pk)  # locked above
            pod = Pod.objects.select_related("node").get(pod_id=report.pod_id)
            changed += _apply(job, pod, report)
    return changed


class _Batch:
    """Running and Succeeded reports of jobs that are preparing or running, applied in memory and
    written in a few statements: the path of nearly every report. The outcome is the one the
    reports give one at a time (`_pod_running`, `_pod_finished`; tests/jobs/test_report_batches.py).

    Also the end of a preempted job whose every live pod ends in the batch and which AIMaster
    restarts (`requeues`): a preemption restart and a requeue, each job in memory, since some
    twenty statements a job kept a batch (and the pods' capacity the preempting job waits for)
    open for seconds.

    Its jobs and pods are read with only the fields it uses (JOB_FIELDS, POD_FIELDS), since whole
    rows are a large share of applying a batch (tests/jobs/test_report_batches.py counts the
    queries, so a field left out, read with a query per row, fails it).
    """

    JOB_FIELDS = ("job_id", "status", "reason_code", "reason_message", "running_at", "finished_at", "source",
                  "restart_count", "preemption_restart_count", *aimaster.CONFIG_FIELDS)
    POD_FIELDS = ("pod_id", "job_id", "status", "sub_status", "current", "terminating", "node_id", "node__name",
                  "exit_code", "started_at", "finished_at", "bound_at", "reason_code", "reason_message", "role",
                  "index", "incarnation", "cpu_m", "mem_mib", "gpu")

    def __init__(self):
        self.pods: list[tuple[Pod, str]] = []  # (changed pod, its status as read)
        self.evicted: list[tuple[Pod, str]] = []  # the same, for the pods of re-queued jobs
        self.events: list[PodEvent] = []
        self.transitions: list[history.Transition] = []
        self.restarts: list[RestartRecord] = []
        self.incarnations: list[Pod] = []
        self.freed = False
        self.claimed = 0  # reports that changed a pod

    @staticmethod
    def takes(job: Job, pods: list[Pod], reports: list[Report]) -> bool:
        reported = {r.pod_id for r in reports}
        return (job.status in (JobStatus.ENV_PREPARING, JobStatus.RUNNING)
                and all(r.status in RAN for r in reports)
                and all(p.current and not p.terminating for p in pods if p.pod_id in reported))

    def apply(self, job: Job, pods: list[Pod], reports: list[Report]) -> None:
        by_id = {p.pod_id: p for p in pods}
        read = {p.pod_id: p.status for p in pods}
        changed: dict[str, Pod] = {}
        for report in reports:
            pod = by_id[report.pod_id]
            if report.status == PodStatus.RUNNING:
                if pod.node_id is None or pod.status not in STARTABLE:
                    continue
                if pod.started_at is None:
                    _observe_start(pod, report.at)
                pod.status, pod.started_at = PodStatus.RUNNING, pod.started_at or report.at
                self.events.append(_started_event(pod, report.at, report.message))
            else:
                if pod.status not in LIVE_STATUSES:
                    continue
                self.events += _finish(pod, report, _finished_fields(pod, report))
                self.freed = True
            changed[pod.pod_id] = pod
            self.claimed += 1
        self.pods += [(pod, read[pod.pod_id]) for pod in changed.values()]
        if not changed:
            return
        current = [p.status for p in pods if p.current and p.node_id is not None]  # as _all_current
        ran = [r.at for r in reports if r.status == PodStatus.RUNNING]
        if job.status == JobStatus.ENV_PREPARING and all(s in RAN for s in current):
            # every pod runs (some may have finished before the last Running report came)
            self.transitions.append(history.transition(job, JobStatus.RUNNING, reason="JobRunning",
                                                    message="All pods are running", at=max(ran or [reports[-1].at])))
        if job.status == JobStatus.RUNNING and all(s == PodStatus.SUCCEEDED for s in current):
            self.transitions.append(history.transition(
                job, JobStatus.SUCCEEDED, reason="JobSucceeded", message="All pods succeeded",
                at=max(r.at for r in reports if r.status == PodStatus.SUCCEEDED)))

    @staticmethod
    def requeues(job: Job, pods: list[Pod], reports: list[Report]) -> bool:
        """Whether the reports end every live pod of this preparing or running job, each stopped
        by a preemption (or a spot release), and AIMaster restarts the job for it: the path of a
        preempted job with fault tolerance on. The rest (a limit reached, a gang with pods left)
        goes one report at a time."""
        live = {p.pod_id: p for p in pods if p.node_id is not None and p.status in LIVE_STATUSES}
        return (job.status in (JobStatus.ENV_PREPARING, JobStatus.RUNNING)
                and all(r.status in FINISHED for r in reports)
                and {r.pod_id for r in reports} == live.keys()
                and all(p.current and p.terminating and p.reason_code in EVICTING_REASONS for p in live.values())
                and aimaster.restarts_after_preemption(job, live[reports[0].pod_id]))

    def requeue(self, job: Job, pods: list[Pod], reports: list[Report]) -> None:
        """What `requeues` admitted, as one report at a time would do it: each pod ends evicted;
        the first restarts the job (Restarting, a restart record), the last re-queues it (new
        incarnations of its pods, Queuing or Bidding)."""
        by_id = {p.pod_id: p for p in pods}
        ended: list[tuple[Pod, Report]] = []
        for report in reports:
            pod = by_id[report.pod_id]
            if pod.status not in LIVE_STATUSES:
                continue  # a duplicate report in the batch
            read = pod.status
            self.events += _finish(pod, report, _finished_fields(pod, report))
            self.evicted.append((pod, read))
            ended.append((pod, report))
        (first, began), (_, last) = ended[0], ended[-1]
        record, restarting = aimaster.begin_restart(job, aimaster.config_for(job), aimaster.preemption_cause(first),
                                                    aimaster.preemption_message(first), began.at)
        target, step = aimaster.requeue_step(job)
        self.restarts.append(record)
        self.transitions += [restarting, history.transition(job, target, at=last.at, **step)]
        self.incarnations += [aimaster.next_incarnation(p, job_id=job.job_id, now=last.at)
                              for p in sorted((p for p in pods if p.current), key=lambda p: (p.role, p.index))]
        self.freed = True
        self.claimed += len(ended)

    def write(self) -> int:
        rows = [(p.status, p.sub_status, p.exit_code, p.started_at, p.finished_at, p.reason_code, p.reason_message,
                 p.pk, read) for p, read in self.pods]
        # Each pod only if it is still as read: a writer that does not lock the job (the node-lost
        # reaper) may have changed it meanwhile.
        written = bulk.update_many(Pod, ("status", "sub_status", "exit_code", "started_at", "finished_at",
                                         "reason_code", "reason_message"), ("id", "status"), rows,
                                   extra_where='NOT "terminating"')
        evicted = [(p.status, p.sub_status, p.exit_code, p.started_at, p.finished_at, False, p.pk, read)
                   for p, read in self.evicted]
        written += bulk.update_many(Pod, ("status", "sub_status", "exit_code", "started_at", "finished_at", "current"),
                                    ("id", "status"), evicted, extra_where='"terminating"')
        if written != len(rows) + len(evicted):
            raise _PodChanged(f"{len(rows) + len(evicted) - written} of {len(rows) + len(evicted)} pods changed "
                              "under the batch")
        moved = {t.job.pk: t.job for t in self.transitions}
        now = timezone.now()
        bulk.update_many(Job, ("status", "reason_code", "reason_message", "running_at", "finished_at", "restart_count",
                               "preemption_restart_count", "modified_at"), ("id",),
                         [(j.status, j.reason_code, j.reason_message, j.running_at, j.finished_at, j.restart_count,
                           j.preemption_restart_count, now, j.pk) for j in moved.values()])
        RestartRecord.objects.bulk_create(self.restarts)
        Pod.objects.bulk_create(self.incarnations)
        history.record(self.transitions, bulk.Insert(PodEvent, ("pod", "at", "type", "reason", "message"),
                                                  [(e.pod.pk, e.at, e.type, e.reason, e.message) for e in self.events]))
        started = [t for t in self.transitions if t.status == JobStatus.RUNNING]
        for pk in aimaster.awaiting_running([t.job.pk for t in started]):
            aimaster.job_running(moved[pk], next(t.at for t in started if t.job.pk == pk))
        if self.freed:
            request_cycle(freed=True)  # their capacity is free now
        return self.claimed


def apply_report(raw: dict, now=None) -> bool:
    """Apply one report. Call inside a transaction. False when it changed nothing (a duplicate)."""
    report = Report.parse(raw, now or timezone.now())
    found = Pod.objects.filter(pod_id=report.pod_id).values_list("pk", "job_id").first()
    if found is None:
        log.warning("pod report for unknown pod %s", report.pod_id)
        return False
    # Lock the job row first: the reports of one gang serialize here, so the last pod to report
    # Running sees all the others running (on SQLite the IMMEDIATE transaction does the same).
    job = Job.objects.locked().get(pk=found[1])
    pod = Pod.objects.select_related("node").get(pk=found[0])
    return _apply(job, pod, report)


def _apply(job: Job, pod: Pod, report: Report) -> bool:
    if report.status == PodStatus.RUNNING:
        return _pod_running(job, pod, report)
    return _pod_finished(job, pod, report)


def _observe_start(pod: Pod, at: datetime) -> None:
    """Time the pod's first start, once its report's transaction commits."""
    if pod.bound_at is not None:
        seconds = max(0.0, (at - pod.bound_at).total_seconds())
        transaction.on_commit(lambda: POD_START_SECONDS.observe(seconds))


def _pod_running(job: Job, pod: Pod, report: Report) -> bool:
    first_start = Coalesce(F("started_at"), Value(report.at, output_field=DateTimeField()))
    claimed = Pod.objects.filter(pk=pod.pk, node__isnull=False, status__in=STARTABLE
                                 ).update(status=PodStatus.RUNNING, started_at=first_start)
    if not claimed:
        return False
    if pod.started_at is None:
        _observe_start(pod, report.at)
    _started_event(pod, report.at, report.message).save()
    if pod.current and job.status == JobStatus.ENV_PREPARING and _all_current(job, *RAN):
        history.change_status(job, JobStatus.RUNNING, reason="JobRunning", message="All pods are running", now=report.at)
        aimaster.job_running(job, report.at)
    return True


def _pod_finished(job: Job, pod: Pod, report: Report) -> bool:
    fields = _finished_fields(pod, report)
    if not Pod.objects.filter(pk=pod.pk, status__in=LIVE_STATUSES).update(**fields):
        return False
    PodEvent.objects.bulk_create(_finish(pod, report, fields))
    request_cycle(freed=True)  # its capacity is free now
    if pod.current and job.status not in FINAL:
        _job_after_pod_finished(job, pod, report)
    return True


def _finish(pod: Pod, report: Report, fields: dict) -> list[PodEvent]:
    """Give the pod a finished report's fields (its row is written by the caller) and return its
    events to write: the end, and the start too when only the end report told it (the Running
    report was overtaken and will be ignored), so that every pod that ran says where and how."""
    events = []
    if pod.started_at is None and report.started is not None:
        _observe_start(pod, report.started)
        events.append(_started_event(pod, report.started, report.started_message))
    for name, value in fields.items():
        setattr(pod, name, value)
    return [*events, _finished_event(pod, report)]


def _finished_fields(pod: Pod, report: Report) -> dict:
    """What a finished report changes on the live pod (as read under its job's lock)."""
    evicted = pod.terminating and pod.reason_code in EVICTING_REASONS
    stopped = pod.terminating
    return {
        "status": PodStatus.FAILED if evicted else report.status,
        "sub_status": PodSubStatus.EVICTED if evicted else PodSubStatus.NORMAL,
        "exit_code": report.exit_code, "finished_at": report.at,
        # Two worker threads may apply a pod's Running and finished reports out of order; the late
        # Running report is then ignored, so take the start the end report repeats, else the binding.
        "started_at": pod.started_at or report.started or pod.bound_at or report.at,
        # A stopped pod keeps the reason it was stopped for; others take the agent's.
        "reason_code": pod.reason_code if stopped else report.reason,
        "reason_message": pod.reason_message if stopped else report.message,
    }


def _started_event(pod: Pod, at: datetime, message: str) -> PodEvent:
    # The agent says how it runs the pod ("podman container of IMAGE", "image not used: process runtime").
    how = f"; {message}" if message else ""
    return PodEvent(pod=pod, at=at, reason="Started", message=f"Pod running on {pod.node}{how}")


def _finished_event(pod: Pod, report: Report) -> PodEvent:
    """The event of a pod that now carries its _finished_fields."""
    kind = PodEvent.Type.NORMAL if pod.status == PodStatus.SUCCEEDED else PodEvent.Type.WARNING
    return PodEvent(pod=pod, at=report.at, reason=pod.reason_code or pod.status, type=kind,
                    message=_finished_message(pod, report))


def _finished_message(pod: Pod, report: Report) -> str:
    label = "Resource Preempted" if pod.preempted else pod.status
    detail = pod.reason_message or report.message
    code = f" (exit code {pod.exit_code})" if pod.exit_code is not None else ""  # None: it never ran
    return f"Pod {label}{code}" + (f": {detail}" if detail else "")


def _job_after_pod_finished(job: Job, pod: Pod, report: Report) -> None:
    if elastic.ended_for_resize(job, pod):  # not a failure: the job goes on at its new size
        elastic.after_pod_ended(job, pod, report.at)
    elif job.status == JobStatus.STOPPING:
        finish_stopping(job, report.at)
    elif job.status == JobStatus.RESTARTING:
        aimaster.pod_finished_while_restarting(job, report.at)
    elif pod.status == PodStatus.FAILED:
        on_pod_failed(job, pod, report)
    elif _all_current(job, PodStatus.SUCCEEDED):
        if job.status == JobStatus.ENV_PREPARING:  # every pod finished before the last Running report
            history.change_status(job, JobStatus.RUNNING, reason="JobRunning", message="All pods are running", now=report.at)
            aimaster.job_running(job, report.at)
        history.change_status(job, JobStatus.SUCCEEDED, reason="JobSucceeded", message="All pods succeeded", now=report.at)


def on_pod_failed(job: Job, pod: Pod, report: Report) -> None:
    """A current pod of an active job failed or was evicted. The job fails and its other pods stop,
    unless AIMaster (fault tolerance on) restarts it or fails it with its own reason. A Preempted
    or SpotReleased pod carries that reason in pod.reason_code, the scheduler's words in
    pod.reason_message.
    """
    if aimaster.after_pod_failure(job, pod, exit_code=pod.exit_code, reason=report.reason,
                                  message=report.message, now=report.at):
        return
    evicted = pod if pod.preempted else aimaster.evicted_peer(job, pod)
    if evicted is not None:
        reason, message = evicted.reason_code, aimaster.preemption_message(evicted)
    else:
        reason = report.reason or "PodFailed"
        message = aimaster.failure_text(pod.pod_id, pod.exit_code, report.message)
    messages = dispatch.stop_pods(live_pods(job), dispatch.STOPPED, f"Job failed: {message}",
                                  job.termination_grace_s)
    dispatch.send_on_commit(messages)
    history.change_status(job, JobStatus.FAILED, reason=reason, message=message, now=report.at)


def _all_current(job: Job, *statuses: str) -> bool:
    """Every bound current pod is in one of `statuses` (an elastic job's unbound workers wait for a
    growth; a gang's pods are all bound once admitted)."""
    return not job.pods.filter(current=True, node__isnull=False).exclude(status__in=statuses).exists()


# ---- stopping ------------------------------------------------------------------------------


def begin_stopping(job: Job, reason: str, message: str, stop_reason: str, now=None) -> None:
    """Job -> Stopping; ask the agents to stop its pods; Stopped at once when none is left."""
    now = now or timezone.now()
    history.change_status(job, JobStatus.STOPPING, reason=reason, message=message, now=now)
    dispatch.send_on_commit(dispatch.stop_pods(live_pods(job), stop_reason, message, job.termination_grace_s))
    finish_stopping(job, now)


def finish_stopping(job: Job, now) -> None:
    """Stopping -> Stopped (or Failed for a max-running-time stop) once no pod of the job is live."""
    if job.status != JobStatus.STOPPING or live_pods(job).exists():
        return
    if job.reason_code == MAX_RUNNING_TIME:
        history.change_status(job, JobStatus.FAILED, reason=MAX_RUNNING_TIME, message=job.reason_message, now=now)
    else:
        history.change_status(job, JobStatus.STOPPED, reason=job.reason_code or STOPPED_BY_USER, message=job.reason_message,
                       now=now)


def enforce_max_running_time(now=None) -> int:
    """Stop running jobs past their maximum running time; returns how many were stopped."""
    now = now or timezone.now()
    stopped = 0
    candidates = Job.objects.filter(
        status=JobStatus.RUNNING, max_running_time_minutes__isnull=False, running_at__isnull=False,
    ).values_list("pk", "running_at", "max_running_time_minutes")
    for pk, running_at, minutes in candidates:
        if running_at + timedelta(minutes=minutes) > now:
            continue
        with transaction.atomic():
            job = Job.objects.locked().get(pk=pk)
            if job.status != JobStatus.RUNNING:  # it ended or stopped meanwhile
                continue
            begin_stopping(job, MAX_RUNNING_TIME, f"Exceeded the maximum running time of {minutes} minutes",
                           dispatch.MAX_RUNNING_TIME, now)
            stopped += 1
    return stopped


# ---- progress (EasyCkpt) ---------------------------------------------------------------------


def apply_progress(items: list[dict]) -> int:
    """Record the newest progress and checkpoint of each pod's job; older news changes nothing."""
    changed = 0
    for item in items:
        job_id = Pod.objects.filter(pod_id=item.get("pod_id")).values_list("job_id", flat=True).first()
        if job_id is None:
            continue
        progress_at = parse_time(item.get("progress_at"))
        checkpoint_at = parse_time(item.get("checkpoint_at"))
        jobs = Job.objects.filter(pk=job_id)
        if progress_at:
            newer = Q(last_progress_at__isnull=True) | Q(last_progress_at__lt=progress_at)
            changed += jobs.filter(newer).update(last_progress_at=progress_at)
        if checkpoint_at:
            newer = Q(last_checkpoint_at__isnull=True) | Q(last_checkpoint_at__lt=checkpoint_at)
            changed += jobs.filter(newer).update(last_checkpoint_at=checkpoint_at,
                                                 last_checkpoint_step=item.get("step"))
    return changed
