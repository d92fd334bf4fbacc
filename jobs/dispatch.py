"""Messages from the platform to the node agents: the contract agent/ implements.

platform -> agent (Celery tasks, one argument: a list of dicts, routed by name):
  "agent.start_pods" [{pod_id, job_id, node, role, index, incarnation, command, env, grace_s,
                      executor ('podman'|'docker'|'process'|'simulated'), max_running_time_s (int or None),
                      image, image_config ({DockerRegistry, Username, Password | Auth} or {}),
                      resources {cpu_m, mem_mib, gpu},
                      data_sources [{data_source_id, uri, mount_path}],
                      code_source ({code_source_id, repo, branch, commit, mount_path} or None)}, ...]
                     A dataset's uri is file:///host/path or nfs://server/export/path
                     (agent/mounts.py); the agent makes it appear at mount_path and clones
                     the code source into its mount_path before the command runs.
  "agent.stop_pods"  [{pod_id, reason ('Preempted'|'Stopped'|'SpotReleased'|'MaxRunningTime'|
                      'Restart'|'NodeDrained'|'Shrunk'|'Resize'), grace_s}, ...]
  "agent.resize_pods" [{pod_id, generation, rank, world_size, master_addr, master_port}, ...]
                     An elastic job resized in place (jobs/elastic.py): the agent writes each running
                     pod's new membership, as JSON of these keys but pod_id, to the file its
                     OPENDLC_MEMBERSHIP_FILE names (atomically); easyckpt.ElasticGroup reads it.
Queue: `agent.<node name>` for a node of a real agent (containers or processes); `agent.simulated` for every simulated node (one
simulated agent serves them all, KWOK-like). One `Message` is one pod; `send` puts consecutive
messages of one kind for one queue into one task (at most MAX_BATCH pods), in order, so a cycle
that starts a thousand pods sends a few tasks, not a thousand.

agent -> platform: "jobs.pod_reports", "jobs.pod_progress", "jobs.pod_logs", "jobs.pod_metrics" and
"nodes.heartbeat" (see jobs/tasks.py).

On the wire (agent/auth.py, jobs/agents.py): the one argument of a task to an agent is the batch
sealed with its node's key (the simulated agent's for agent.simulated), so only that agent reads it
and only the platform writes it; a node without a credential is sent nothing. A task from an agent
carries its batch in an envelope signed with the agent's key, refused unless it verifies, within the
replay window, and then applied only to pods bound to the sender's node.

Messages are built inside the transaction that decides them and sent only after it commits
(`send_on_commit`), so a rolled-back cycle starts or stops nothing. A start can still be lost after
the commit (the scheduler killed before it sent, an agent killed holding it, a broker restarted
without its data): `resend_unstarted` sends it again, and agents ignore a start of a pod they know.
"""

from __future__ import annotations

import itertools
import logging
import zlib
from dataclasses import dataclass
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from dbkit import bulk
from jobs import agents
from jobs.models import Job, JobEvent, JobSpec, Pod, PodEvent
from jobs.states import PodStatus
from quotas.models import Executor, Node, NodeStatus

log = logging.getLogger(__name__)

START_POD = "agent.start_pods"
STOP_POD = "agent.stop_pods"
RESIZE_POD = "agent.resize_pods"
MAX_BATCH = 500
SIMULATED_QUEUE = "agent.simulated"

# Stop reasons of the contract.
PREEMPTED = "Preempted"
STOPPED = "Stopped"
SPOT_RELEASED = "SpotReleased"
MAX_RUNNING_TIME = "MaxRunningTime"
RESTART = "Restart"
NODE_DRAINED = "NodeDrained"
SHRUNK = "Shrunk"  # an elastic job's worker above its minimum, reclaimed: the job goes on smaller
RESIZE = "Resize"  # an elastic job's worker it keeps, restarted at the new world size (jobs/elastic.py)
STOP_REASONS = (PREEMPTED, STOPPED, SPOT_RELEASED, MAX_RUNNING_TIME, RESTART, NODE_DRAINED, SHRUNK, RESIZE)
# The pod ends Evicted ("Resource Preempted"); AIMaster requeues its job as for a preemption (but
# a Shrunk pod's job is only resized: jobs/elastic.py).
EVICTING_REASONS = (PREEMPTED, SPOT_RELEASED, NODE_DRAINED, SHRUNK)
RESIZING = (SHRUNK, RESIZE)
RESIZED = "ElasticResize"  # the job event of each resize (jobs/elastic.py); their count is its generation


@dataclass(frozen=True)
class Message:
    task: str
    payload: dict
    queue: str


def _queue(executor: str, node_name: str) -> str:
    return SIMULATED_QUEUE if executor == Executor.SIMULATED else Node.queue_of(node_name)


def master_port(job_id: str) -> int:
    """A port stable for the job in every process (crc32, not the salted built-in hash)."""
    return 20000 + zlib.crc32(job_id.encode()) % 20000


def checkpoint_dir(job_id: str) -> str:
    return f"{settings.OPENDLC_POD_ROOT}/{job_id}/checkpoints"


def membership_file(job_id: str, pod_id: str) -> str:
    """Where the agent writes an in-place resize for the pod: under the checkpoint directory, which
    every runtime shares with the pod (a container mounts it at the same path)."""
    return f"{checkpoint_dir(job_id)}/.membership/{pod_id}.json"


def start_messages(job: Job) -> list[Message]:
    """Start messages for every bound current pod of the job, with the gang's rank layout."""
    return start_messages_for([job])


@dataclass(frozen=True)
class BoundPod:
    """What a start message says of a pod and its node: values, not models, since a busy cycle
    starts hundreds of pods and loading each as a model costs it dearly."""

    pod_id: str
    role: str
    index: int
    incarnation: int
    gpu_indices: list[int]
    cpu_m: int
    mem_mib: int
    gpu: int
    node: str
    hostname: str
    executor: str


BOUND_POD_FIELDS = ("pod_id", "role", "index", "incarnation", "gpu_indices", "cpu_m", "mem_mib", "gpu",
                    "node__name", "node__hostname", "node__executor")


def start_messages_for(jobs: list[Job]) -> list[Message]:
    """start_messages of many jobs, in three queries whatever their number (four when one of them
    resizes in place: their generations)."""
    by_pk = {j.pk: j for j in jobs}
    roles = _roles(by_pk)
    pods: dict[int, list[BoundPod]] = {pk: [] for pk in by_pk}
    for job_id, *fields in Pod.objects.filter(job_id__in=by_pk, current=True, node__isnull=False).values_list(
            "job_id", *BOUND_POD_FIELDS):
        pods[job_id].append(BoundPod(*fields))
    in_place = generations([j for j in jobs if j.resizes_in_place])
    messages = []
    for pk, job in by_pk.items():
        messages += gang_start(job, pods[pk], roles[pk], in_place.get(pk, 0))
    return messages


def _roles(by_pk: dict[int, Job]) -> dict[int, list[RoleRun]]:
    roles: dict[int, list[RoleRun]] = {pk: [] for pk in by_pk}
    for job_id, *fields in JobSpec.objects.filter(job_id__in=by_pk).order_by("pk").values_list(
            "job_id", "role", "command", "image", "image_config"):
        roles[job_id].append(RoleRun(*fields))
    return roles


def generations(jobs: list[Job]) -> dict[int, int]:
    """Each job's membership generation (pk -> n; absent: 0): how many times it was resized."""
    if not jobs:
        return {}
    return dict(JobEvent.objects.filter(job__in=jobs, reason=RESIZED).values("job_id").annotate(
        n=Count("id")).values_list("job_id", "n"))


def resize_in_place(job: Job, generation: int, new: set[int]) -> list[Message]:
    """An in-place resize of an elastic job to its live bound workers (not the ones stopping): the
    new ones (pks in `new`) start at the new world, the running ones are told their new rank and
    world (RESIZE_POD) and keep running. Rank 0 must stay where it is (jobs/elastic.py checks)."""
    rows = list(Pod.objects.filter(job=job, current=True, node__isnull=False, terminating=False).values_list(
        "pk", *BOUND_POD_FIELDS))
    pods, new_ids = [BoundPod(*fields) for _, *fields in rows], {row[1] for row in rows if row[0] in new}
    roles = _roles({job.pk: job})[job.pk]
    ranked, master = _ranked(pods, roles)
    by_role = {r.role: r for r in roles}
    messages = []
    for rank, pod in enumerate(ranked):
        if pod.pod_id in new_ids:
            payload = start_payload(job, pod, rank, len(ranked), master, by_role.get(pod.role, NO_ROLE), generation)
            messages.append(Message(START_POD, payload, _queue(pod.executor, pod.node)))
        else:
            messages.append(Message(RESIZE_POD, {
                "pod_id": pod.pod_id, "generation": generation, "rank": rank, "world_size": len(ranked),
                "master_addr": master, "master_port": master_port(job.job_id)}, _queue(pod.executor, pod.node)))
    return messages


@dataclass(frozen=True)
class RoleRun:
    """What a role's pods run."""

    role: str
    command: str  # "": the job's command
    image: str
    image_config: dict


NO_ROLE = RoleRun("", "", "", {})


def gang_start(job: Job, pods: list[BoundPod], roles: list[RoleRun], generation: int = 0) -> list[Message]:
    """The start messages of a job's bound current pods (all of them), given its roles in order."""
    pods, master = _ranked(pods, roles)
    by_role = {r.role: r for r in roles}
    return [
        Message(START_POD, start_payload(job, pod, rank, len(pods), master, by_role.get(pod.role, NO_ROLE),
                                         generation),
                _queue(pod.executor, pod.node))
        for rank, pod in enumerate(pods)
    ]


def _ranked(pods: list[BoundPod], roles: list[RoleRun]) -> tuple[list[BoundPod], str]:
    """The pods in rank order (the roles' order, then the pods' index) and the master's address
    (rank 0's host)."""
    order = {r.role: n for n, r in enumerate(roles)}
    pods = sorted(pods, key=lambda p: (order.get(p.role, len(order)), p.index))
    return pods, (pods[0].hostname or "127.0.0.1") if pods else ""


def start_payload(job: Job, pod: BoundPod, rank: int, world_size: int, master_addr: str, role: RoleRun,
                  generation: int = 0) -> dict:
    return {
        "pod_id": pod.pod_id, "job_id": job.job_id, "node": pod.node, "role": pod.role,
        "index": pod.index, "incarnation": pod.incarnation,
        "command": role.command or job.user_command,
        "image": role.image, "image_config": role.image_config or {},
        "resources": {"cpu_m": pod.cpu_m, "mem_mib": pod.mem_mib, "gpu": pod.gpu},
        "env": pod_env(job, pod, rank, world_size, master_addr, generation),
        "grace_s": job.termination_grace_s, "executor": pod.executor,
        "max_running_time_s": job.max_running_time_minutes * 60 if job.max_running_time_minutes else None,
        "data_sources": list(job.data_sources or []), "code_source": job.code_source,
    }


def pod_env(job: Job, pod: BoundPod, rank: int, world_size: int, master_addr: str,
            generation: int = 0) -> dict[str, str]:
    gpus = ",".join(str(g) for g in pod.gpu_indices)
    # The platform's variables win over the job's envs of the same name.
    return {
        **user_env(job),
        "RANK": str(rank), "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port(job.job_id)),
        # One process per pod, and CUDA_VISIBLE_DEVICES shows it only its own GPUs: its first
        # visible device is cuda:0, so LOCAL_RANK is 0 (torch.cuda.set_device(LOCAL_RANK)).
        "LOCAL_RANK": "0",
        "CUDA_VISIBLE_DEVICES": gpus, "NVIDIA_VISIBLE_DEVICES": gpus,
        # The indices are NVML's, in PCI bus order; CUDA's own default order is fastest first,
        # which on a node of mixed GPUs would give a pod another GPU than the one it was assigned.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OPENDLC_JOB_ID": job.job_id, "OPENDLC_POD_ID": pod.pod_id,
        "OPENDLC_CKPT_DIR": checkpoint_dir(job.job_id),
        **elastic_env(job, world_size, master_addr),
        **({"OPENDLC_ELASTIC_GENERATION": str(generation),
            "OPENDLC_MEMBERSHIP_FILE": membership_file(job.job_id, pod.pod_id)} if job.resizes_in_place else {}),
    }


def elastic_env(job: Job, world_size: int, master_addr: str) -> dict[str, str]:
    """An elastic job's workers see torchrun's rendezvous settings (a c10d rendezvous at the first
    worker) and the job's range (OPENDLC_ELASTIC_MIN/MAX); WORLD_SIZE and RANK are this start's.
    A job resized in place also gets its generation and membership file (pod_env)."""
    found = job.elastic_range
    if found is None:
        return {}
    # torchrun's --nnodes is this start's world, not the job's MIN:MAX: the platform starts exactly
    # these workers together and resizes by restarting them, while with a range below its maximum
    # torchrun would hold the rendezvous open for its last call (30 s) for workers nobody starts.
    return {"PET_NNODES": f"{world_size}:{world_size}", "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"{master_addr}:{master_port(job.job_id)}", "PET_RDZV_ID": job.job_id,
            "OPENDLC_ELASTIC_MIN": str(found[0]), "OPENDLC_ELASTIC_MAX": str(found[1])}


def user_env(job: Job) -> dict[str, str]:
    """The job's own variables: Envs, then CustomEnvs, which win a name given in both (a hidden
    value must not be replaced by a visible one the user may not have meant to override it)."""
    env = {str(k): str(v) for k, v in (job.envs or {}).items()}
    env.update({str(e["Key"]): str(e["Value"]) for e in job.custom_envs or []})
    return env


def stop_pods(pods, reason: str, message: str, grace_s: int, event: str = "Stopping") -> list[Message]:
    """Mark live bound pods terminating with the stop reason; returns the stop messages to send."""
    return stop_many([Stop(pod.pod_id, reason, message, grace_s) for pod in pods], event)


@dataclass(frozen=True)
class Stop:
    pod_id: str
    reason: str  # one of STOP_REASONS
    message: str
    grace_s: int

    def __post_init__(self):
        if self.reason not in STOP_REASONS:
            raise ValueError(f"stop reason must be one of {STOP_REASONS}, got {self.reason!r}")


def stop_many(stops: list[Stop], event: str = "Stopping") -> list[Message]:
    """Mark live bound pods terminating, each with its own reason; returns the stop messages to send.

    Only a pod still bound, live and not terminating is claimed: one already terminating keeps its
    first reason (a preempted pod stays preempted), and one that finished meanwhile gets no
    message. Call it holding the pods' job rows (lock order: the job, then its pods). A few
    statements for any number of pods: a busy cycle preempts dozens, and a statement or two per
    pod was most of its apply step (bench/kueue_baseline.py).
    """
    by_id = {s.pod_id: s for s in stops}
    if not by_id:
        return []
    claimed = list(Pod.objects.holding().filter(pod_id__in=by_id, terminating=False).locked().values_list(
        "pk", "pod_id", "node__name", "node__executor"))
    bulk.update_many(Pod, ("terminating", "reason_code", "reason_message"), ("id",),
                     [(True, by_id[pod_id].reason, by_id[pod_id].message, pk) for pk, pod_id, _, _ in claimed])
    PodEvent.objects.bulk_create(
        PodEvent(pod_id=pk, reason=event, message=by_id[pod_id].message,
                 type=PodEvent.Type.WARNING if by_id[pod_id].reason in EVICTING_REASONS else PodEvent.Type.NORMAL)
        for pk, pod_id, _, _ in claimed)
    return [Message(STOP_POD, {"pod_id": pod_id, "reason": by_id[pod_id].reason, "grace_s": by_id[pod_id].grace_s},
                    _queue(executor, node))
            for _, pod_id, node, executor in claimed]


def live_pods(job: Job):
    return Pod.objects.holding().filter(job=job)


def send(messages: list[Message]) -> None:
    for (task, queue), group in itertools.groupby(messages, key=lambda m: (m.task, m.queue)):
        payloads = [m.payload for m in group]
        for start in range(0, len(payloads), MAX_BATCH):
            batch = payloads[start:start + MAX_BATCH]
            try:
                sealed = agents.seal_for(queue, task, batch)
                if sealed is not None:
                    current_app.send_task(task, args=[sealed], queue=queue)
            except Exception:  # a broker outage must not lose the rest; the agent's reconcile repairs
                log.exception("could not send %s for %d pods (%s, ...) to %s", task, len(batch), batch[0]["pod_id"],
                              queue)


def resend_unstarted(now=None) -> list[str]:
    """Send the start message again for each pod bound to a Ready node more than
    OPENDLC_START_RESEND_AFTER_S ago that no agent has reported started; returns their pod ids."""
    from datetime import timedelta

    cutoff = (now or timezone.now()) - timedelta(seconds=settings.OPENDLC_START_RESEND_AFTER_S)
    # Not the workers of an elastic job being resized: they start once its stopped ones are gone.
    resizing = Pod.objects.holding().filter(terminating=True, reason_code__in=RESIZING).values("job_id")
    unstarted = dict(Pod.objects.holding().filter(
        status=PodStatus.PENDING, started_at__isnull=True, terminating=False, bound_at__lt=cutoff,
        node__status=NodeStatus.READY).exclude(job_id__in=resizing).values_list("pod_id", "job_id"))
    if not unstarted:
        return []
    jobs = list(Job.objects.filter(pk__in=set(unstarted.values())))
    messages = [m for m in start_messages_for(jobs) if m.payload["pod_id"] in unstarted]
    log.warning("no agent reported %d pod(s) started %s s after they were bound; sending their starts again: %s",
                len(messages), settings.OPENDLC_START_RESEND_AFTER_S, ", ".join(sorted(unstarted)[:10]))
    send(messages)
    return [m.payload["pod_id"] for m in messages]


def send_on_commit(messages: list[Message]) -> None:
    if messages:
        transaction.on_commit(partial(send, list(messages)))
