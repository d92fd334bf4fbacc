"""Elastic jobs (PAI's ElasticSpec) after the scheduler resized them: TorchElastic's restart
semantics, carried out by the platform.

A resize (scheduler/elastic.py decides it: a Shrink when a reclaim took workers above the job's
MinParallelism, a Growth when free capacity let it take more) stops every live pod of the job:
the workers taken with reason Shrunk (they end Evicted, "Resource Preempted"), the workers kept
with reason Resize. As each ends, a kept worker gets its next incarnation on the same node and
GPUs, a taken one an unbound incarnation that a later growth may place again. Once none of them
is live, every bound worker starts together with the new world size (dispatch.pod_env: RANK,
WORLD_SIZE, torchrun's PET_NNODES and the rendezvous at the first worker), and resumes from the
job's last checkpoint (easyckpt). A resize is not a failure: the job stays Running and no
restart is counted against Maximum Job Restarts.

The job keeps its MaxParallelism pods as rows from the start: those not bound are current,
Pending and unbound, the pods a growth binds.

In place (ElasticSpec ResizeInPlace, OpenDLC's own key): restarting costs every worker its whole
start-up at each resize, so a job whose training loop uses easyckpt.ElasticGroup keeps the
workers that stay. They are told the new generation, rank and world (dispatch.RESIZE_POD; the
agent writes it to the pod's membership file) and re-form their process group when the new
workers have joined; the workers a growth bound start at once at that generation; the ones a
shrink took just stop. Rank 0 hosts the group's store, so a resize is in place only when every
worker it keeps is running and rank 0 stays the same pod; else it restarts as above.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from jobs import dispatch
from jobs.aimaster import next_incarnation
from jobs.models import Job, JobEvent, Pod, PodEvent
from jobs.states import LIVE_STATUSES, JobStatus, PodStatus

RESIZED = dispatch.RESIZED
ACTIVE = (JobStatus.ENV_PREPARING, JobStatus.RUNNING)  # the states in which a job is resized


def workers(job: Job) -> int:
    """The workers the job holds now: its bound current pods."""
    return Pod.objects.filter(job=job, current=True, node__isnull=False).count()


def begin_resize(job: Job, message: str, now: datetime, new=()) -> list[dispatch.Message]:
    """Stop the job's live workers that are not stopping yet (reason Resize), but the ones a growth
    just bound (`new`, pks), and record the resize; returns the stop messages. Call holding the
    job's row, after any Shrunk stops."""
    JobEvent.objects.create(job=job, at=now, reason=RESIZED, message=message)
    kept = dispatch.live_pods(job).filter(current=True, terminating=False).exclude(pk__in=new)
    if job.resizes_in_place and _rank_zero_stays(job, kept, new):
        return _in_place(job, message, now, set(new))
    messages = dispatch.stop_pods(kept, dispatch.RESIZE, message, job.termination_grace_s, event="Resizing")
    if not messages and not resizing(job):  # nothing was running: start at the new size at once
        messages = dispatch.start_messages(job)
    return messages


def _rank_zero_stays(job: Job, kept, new) -> bool:
    """Whether every worker the resize keeps is running and the first of them by index (rank 0 of
    the new world) is the first of the old world too, whose process hosts the group's store. An
    elastic job has one role, so ranks follow the index."""
    kept = list(kept.values_list("index", "status"))
    if not kept or any(status != PodStatus.RUNNING for _, status in kept):
        return False
    first = min(index for index, _ in kept)
    old = dispatch.live_pods(job).filter(current=True).exclude(pk__in=new).values_list("index", flat=True)
    added = Pod.objects.filter(pk__in=new).values_list("index", flat=True)
    return first == min(old) and all(index > first for index in added)


def _in_place(job: Job, message: str, now: datetime, new: set[int]) -> list[dispatch.Message]:
    generation = dispatch.generations([job])[job.pk]  # this resize's event is counted
    messages = dispatch.resize_in_place(job, generation, new)
    told = {m.payload["pod_id"]: m.payload for m in messages if m.task == dispatch.RESIZE_POD}
    PodEvent.objects.bulk_create(
        PodEvent(pod=pod, at=now, reason="Resized",
                 message=f"Rank {told[pod.pod_id]['rank']} of {told[pod.pod_id]['world_size']} workers, in place "
                         f"(generation {generation}): {message}")
        for pod in Pod.objects.filter(job=job, pod_id__in=told))
    return messages


def resizing(job: Job) -> bool:
    """Whether a worker stopped for a resize is still live."""
    return dispatch.live_pods(job).filter(terminating=True, reason_code__in=dispatch.RESIZING).exists()


def ended_for_resize(job: Job, pod: Pod) -> bool:
    """Whether this ended current pod was stopped by a resize of the still active job."""
    return (pod.current and pod.reason_code in dispatch.RESIZING
            and job.status in ACTIVE)


def after_pod_ended(job: Job, pod: Pod, at: datetime) -> None:
    """A worker stopped for a resize ended: its next incarnation (in place if the job keeps it);
    once no stopped worker is live, all bound workers start at the new world size."""
    Pod.objects.filter(pk=pod.pk).update(current=False)
    bound = {}
    if pod.reason_code == dispatch.RESIZE:
        bound = {"node_id": pod.node_id, "gpu_indices": list(pod.gpu_indices), "kind": pod.kind, "bound_at": at}
    next_incarnation(pod, job_id=job.job_id, now=at, **bound).save(force_insert=True)
    # A job resized in place still runs its kept workers: nothing waits to start.
    if not resizing(job) and not job.pods.filter(current=True, status=PodStatus.RUNNING).exists():
        dispatch.send_on_commit(dispatch.start_messages(job))


def unbound_workers(job_ids) -> dict[tuple[str, str, int], int]:
    """(job id, role, index) -> pk of each unbound current worker of these jobs (growth binds them)."""
    return {(job_id, role, index): pk for pk, job_id, role, index in Pod.objects.filter(
        job__job_id__in=job_ids, current=True, node__isnull=True, status=PodStatus.PENDING).values_list(
        "pk", "job__job_id", "role", "index")}


def summary(job: Job, pods: Iterable[Pod]) -> dict | None:
    """An elastic job's workers now and its range, as the console and the API show them; None for
    a job that is not elastic. `pods`: the job's pods as the caller already read them (all of them,
    or at least the current ones)."""
    found = job.elastic_range
    if found is None:
        return None
    current = sum(1 for p in pods if p.current and p.node_id is not None and p.status in LIVE_STATUSES)
    return {"current": current, "min": found[0], "max": found[1]}


def resizes(job: Job) -> list[JobEvent]:
    """Its resizes, oldest first: the events begin_resize recorded."""
    return list(job.events.filter(reason=RESIZED).order_by("at", "id"))
