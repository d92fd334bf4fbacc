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
"""

from __future__ import annotations

from datetime import datetime

from jobs import dispatch
from jobs.aimaster import next_incarnation
from jobs.models import Job, JobEvent, Pod
from jobs.states import LIVE_STATUSES, JobStatus, PodStatus

RESIZED = "ElasticResize"  # the job event of each resize
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
    messages = dispatch.stop_pods(kept, dispatch.RESIZE, message, job.termination_grace_s, event="Resizing")
    if not messages and not resizing(job):  # nothing was running: start at the new size at once
        messages = dispatch.start_messages(job)
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
    if not resizing(job):
        dispatch.send_on_commit(dispatch.start_messages(job))


def unbound_workers(job_ids) -> dict[tuple[str, str, int], int]:
    """(job id, role, index) -> pk of each unbound current worker of these jobs (growth binds them)."""
    return {(job_id, role, index): pk for pk, job_id, role, index in Pod.objects.filter(
        job__job_id__in=job_ids, current=True, node__isnull=True, status=PodStatus.PENDING).values_list(
        "pk", "job__job_id", "role", "index")}


def summary(job: Job) -> dict | None:
    """An elastic job's workers now and its range, as the console and the API show them; None for
    a job that is not elastic. Reads job.pods.all(), so a prefetched list costs no query."""
    found = job.elastic_range
    if found is None:
        return None
    current = sum(1 for p in job.pods.all() if p.current and p.node_id is not None and p.status in LIVE_STATUSES)
    return {"current": current, "min": found[0], "max": found[1]}


def resizes(job: Job) -> list[JobEvent]:
    """Its resizes, oldest first: the events begin_resize recorded."""
    return list(job.events.filter(reason=RESIZED).order_by("at", "id"))
