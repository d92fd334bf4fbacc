"""Step 4 of a schedule cycle: carry out scheduler.plan's decisions inside the cycle's transaction.

Preemptions first, so that the stop messages go out before the start messages; then the
admissions: a cycle may admit thousands of jobs, so each step is a few statements for all of
them (dbkit.bulk), not a few per job. The messages are returned, to be sent after commit.
"""

from __future__ import annotations

import collections
import itertools

from django.db import transaction
from prometheus_client import Counter, Histogram

import scheduler
from cycle import resize
from cycle.waiting import WaitingJobs
from dbkit import bulk
from jobs import dispatch, history
from jobs.models import Job, JobEvent, Pod, Source
from jobs.states import WAITING, JobStatus
from quotas.models import Executor, Node
from scheduler.decisions import OUTBID, STOCK_SHORT

RELEASES = {OUTBID: dispatch.SPOT_RELEASED, STOCK_SHORT: dispatch.SPOT_RELEASED}  # else Preempted

# Counted once the cycle's transaction commits: a cycle rolled back admitted and preempted nothing.
ADMISSIONS = Counter("opendlc_admissions", "Jobs admitted by the schedule cycle, by the kind of their pods", ["kind"])
PREEMPTIONS = Counter("opendlc_preemptions", "Pods the schedule cycle preempted or released, by the "
                      "scheduler's reason", ["reason"])
ADMISSION_WAIT = Histogram("opendlc_admission_wait_seconds", "From a job's submission, or its latest restart, to its "
                           "admission", ["kind"], buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600,
                                                           24 * 3600))


def apply(decisions: scheduler.Decisions, now, waiting: WaitingJobs) -> list[dispatch.Message]:
    """Preempt, then admit, then resize elastic jobs; returns the stop and start messages to send
    once this commits."""
    shrunk = {s.job_id for s in decisions.shrinks}
    messages = _preempt_all(decisions.preemptions, now, shrunk)
    messages += _admit_all(decisions.admissions, now, waiting)
    messages += resize.apply(decisions.shrinks, decisions.growths, now)
    return messages


def _preempt_all(preemptions: tuple[scheduler.Preemption, ...], now, shrunk=frozenset()) -> list[dispatch.Message]:
    """Stop the preempted pods ("Resource Preempted"), one job event each naming its pods. The pods
    of a job the cycle shrinks (`shrunk`) stop as Shrunk: the job goes on (jobs/elastic.py)."""
    if not preemptions:
        return []
    jobs = {job_id: (pk, grace_s) for pk, job_id, grace_s in Job.objects.filter(
        job_id__in={p.job_id for p in preemptions}).locked().values_list("pk", "job_id", "termination_grace_s")}
    messages = dispatch.stop_many([
        dispatch.Stop(p.pod_id, dispatch.SHRUNK if p.job_id in shrunk else RELEASES.get(p.reason.code, dispatch.PREEMPTED),
                      p.reason.message, jobs[p.job_id][1])
        for p in preemptions], event="Resource Preempted")
    stopped = {m.payload["pod_id"] for m in messages}
    reasons = collections.Counter(p.reason.code for p in preemptions if p.pod_id in stopped)
    transaction.on_commit(lambda: _count_preemptions(reasons))
    events = []
    for job_id, group in itertools.groupby(sorted(preemptions, key=lambda p: p.job_id), key=lambda p: p.job_id):
        group = list(group)
        names = [p.pod_id for p in group if p.pod_id in stopped]
        if names:
            reason = group[0].reason
            events.append(JobEvent(job_id=jobs[job_id][0], at=now, type=JobEvent.Type.WARNING,
                                   reason=RELEASES.get(reason.code, dispatch.PREEMPTED),
                                   message=f"Resource Preempted: {reason.message} (pods {', '.join(names)})"))
    JobEvent.objects.bulk_create(events + _preempting_events([p for p in preemptions if p.pod_id in stopped], now))
    return messages


def _preempting_events(preemptions: list[scheduler.Preemption], now) -> list[JobEvent]:
    """The other side of each preemption made for a job: on that job, one event per job it
    preempted, so that its page links to the jobs that made way for it."""
    victims: dict[tuple[str, str], list[str]] = {}
    for p in preemptions:
        if p.reason.by_job:
            victims.setdefault((p.reason.by_job, p.job_id), []).append(p.pod_id)
    if not victims:
        return []
    pks = dict(Job.objects.filter(job_id__in={by for by, _ in victims}).values_list("job_id", "pk"))
    return [JobEvent(job_id=pks[by], at=now, reason="Preempting",
                     message=f"Preempted job {victim} (pods {', '.join(pods)}) to start")
            for (by, victim), pods in sorted(victims.items()) if by in pks]


def _admit_all(admissions: tuple[scheduler.Admission, ...], now, waiting: WaitingJobs) -> list[dispatch.Message]:
    """Bind the admitted jobs' pods and move the jobs to EnvPreparing, in a few statements.

    A cycle may admit thousands of jobs, and a handful of queries per job (lock, bind, save,
    history, event, start messages) would make applying them most of the cycle's time.
    """
    if not admissions:
        return []
    # Lock the job rows and re-check: a user may have stopped a job since the snapshot was read. Only the fields the admission and the start messages use
    # (ADMIT_FIELDS): building every field of thousands of rows is a large share of applying them.
    jobs = {j.job_id: j for j in Job.objects.filter(
        job_id__in=[a.job_id for a in admissions], status__in=WAITING).locked().only(*ADMIT_FIELDS)}
    admitted = [a for a in admissions if a.job_id in jobs]
    if not admitted:
        return []
    nodes = {name: (pk, hostname, executor) for name, pk, hostname, executor in Node.objects.filter(
        name__in={p.node for a in admitted for p in a.placements}).values_list("name", "pk", "hostname", "executor")}
    # By pod pk, as this cycle's snapshot read them (cycle/waiting.py): matching (job, role, index)
    # made PostgreSQL hash every unbound pod of the queue for each admission. The start messages are
    # built from the same reads, since reading the bound pods and the roles back costs the apply.
    binds, starts = [], []
    for a in admitted:
        unplaced, roles = waiting.unplaced(a.job_id)
        pods = []
        for pl in a.placements:
            pod, (node, hostname, executor) = unplaced.get((pl.role, pl.index)), nodes[pl.node]
            if pod is None:
                raise RuntimeError(f"pod {pl.role} {pl.index} of {a.job_id} was not read waiting to be bound")
            binds.append((node, list(pl.gpu_indices), a.kind, now, pod.pk))
            pods.append(dispatch.BoundPod(pod.pod_id, pl.role, pl.index, pod.incarnation, list(pl.gpu_indices),
                                          pod.cpu_m, pod.mem_mib, pod.gpu, pl.node, hostname, executor))
        starts.append((jobs[a.job_id], pods, roles))
    bound = bulk.update_many(Pod, ("node", "gpu_indices", "kind", "bound_at"), ("id",), binds,
                              extra_where='"current" AND "node_id" IS NULL')
    if bound != len(binds):  # the snapshot and the rows disagree: roll the whole cycle back
        raise RuntimeError(f"{len(binds) - bound} admitted pods were not waiting to be bound")
    transitions = []
    for a in admitted:
        job = jobs[a.job_id]
        transitions.append(history.transition(job, JobStatus.ENV_PREPARING, reason="JobAdmitted",
                                              message=_admitted(a, nodes), at=now))
        job.use_oversold_resource = a.use_oversold if job.source == Source.QUOTA else None
    bulk.update_many(Job, ("status", "reason_code", "reason_message", "use_oversold_resource", "wait_reason",
                           "wait_reason_code", "queue_position", "modified_at"), ("id",),
                     [(j.status, j.reason_code, j.reason_message, j.use_oversold_resource, "", "", None, now, j.pk)
                      for j in (jobs[a.job_id] for a in admitted)])
    history.record(transitions)
    waits = [(a.kind, (now - waiting.queued_since(a.job_id)).total_seconds()) for a in admitted]
    transaction.on_commit(lambda: _count_admissions(waits))
    return [message for job, pods, roles in starts for message in dispatch.gang_start(job, pods, roles)]


# What _admit_all reads or writes of a job (history.transition, the start messages): another field
# would be read with a query per job (tests/jobs/test_scheduling.py counts them).
ADMIT_FIELDS = ("job_id", "status", "reason_code", "reason_message", "running_at", "finished_at", "source",
                "use_oversold_resource", "user_command", "envs", "custom_envs", "termination_grace_s", "max_running_time_minutes",
                "data_sources", "code_source", "elastic_spec")


def _count_preemptions(reasons: collections.Counter) -> None:
    for reason, pods in reasons.items():
        PREEMPTIONS.labels(reason).inc(pods)


def _count_admissions(waits: list[tuple[str, float]]) -> None:
    # A cycle may admit thousands: the counter moves once per kind, the histogram once per job.
    for kind, admitted in collections.Counter(kind for kind, _ in waits).items():
        ADMISSIONS.labels(kind).inc(admitted)
    observe = {kind: ADMISSION_WAIT.labels(kind).observe for kind in {kind for kind, _ in waits}}
    for kind, seconds in waits:
        observe[kind](seconds)


def _admitted(a: scheduler.Admission, nodes: dict[str, tuple]) -> str:
    where = ", ".join(sorted({p.node for p in a.placements}))
    label = {scheduler.KIND_GUARANTEED: "In Quota", scheduler.KIND_IDLE: "Not in Quota (idle resources, preemptible)",
             scheduler.KIND_SPOT: "on preemptible resources", scheduler.KIND_PAYG: "on public resources"}[a.kind]
    # A process node runs the command on the host: the job's page must say its image is not used.
    hosts = sorted({p.node for p in a.placements if nodes[p.node][2] == Executor.PROCESS})
    note = f"; image not used: process runtime on {', '.join(hosts)}" if hosts else ""
    return f"Admitted {label} on {where}{note}"
