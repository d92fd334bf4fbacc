"""Nodes as their agents report them: registration by heartbeat, and nodes lost when heartbeats stop.

An agent sends `nodes.heartbeat` every OPENDLC_HEARTBEAT_INTERVAL_S seconds, signed with the join token
an admin issued for its node (jobs/agents.py verifies it first). The first heartbeat of a node
registers it, with an instance type made for its machine shape (`local.c<cpu>m<GiB>g<gpus>`, price 0)
in the public pool, or in the quota the admin registered it into. A heartbeat speaks only for its
sender's node. The simulated agent's heartbeat (node None) keeps every simulated node alive at once.

A node whose last heartbeat is older than OPENDLC_NODE_LOST_AFTER_S becomes NotReady; its pods
become Unknown, then Failed with reason NodeLost, which frees their capacity. Simulated nodes too:
their agent's heartbeat is what keeps them Ready.

An agent that restarted while its nodes stayed Ready (killed and started again by its supervisor)
says when it started (`boot`): the pods that ran before then and that it neither adopted (listed
running) nor reported ended are orphans, failed with reason NodeLost like a lost node's, so that
AIMaster requeues them (`reclaim_orphans`). The simulated agent keeps nothing across a restart.
"""

import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs import dispatch
from jobs.agents import Sender
from jobs.cycle_requests import request_cycle
from jobs.models import Job, JobEvent, Pod
from jobs.states import PodStatus
from quotas.models import Executor, Node, NodeStatus, ResourceSpec

log = logging.getLogger(__name__)

NODE_LOST = "NodeLost"


def record_heartbeat(beat: dict, sender: Sender, now: datetime | None = None) -> Node | None:
    """Register or refresh the sender's node; returns it (None for the simulated agent, and for a
    heartbeat that speaks for another node than its sender's, which is refused)."""
    now = now or timezone.now()
    if not isinstance(beat, dict) or beat.get("node") != (None if sender.simulated else sender.name):
        log.warning("refused a heartbeat of agent %s for node %r", sender.name,
                    beat.get("node") if isinstance(beat, dict) else beat)
        return None
    # The agent's clock says when it was alive; never trust it beyond our own clock.
    at = min(_parse(beat.get("at")) or now, now)
    if not beat.get("node"):
        simulated = Node.objects.filter(executor=Executor.SIMULATED)
        _refresh(simulated, at, now)
        reclaim_orphans(simulated, beat, at)
        return None
    node = _register(beat, sender.quota_id)
    _refresh(Node.objects.filter(pk=node.pk), at, now)
    node.refresh_from_db()
    _stop_unwanted(node, beat.get("running_pod_ids") or [])
    reclaim_orphans(Node.objects.filter(pk=node.pk), beat, at)
    return node


def reclaim_orphans(nodes, beat: dict, at: datetime) -> list[str]:
    """Fail the pods of these nodes that ran before their agent's restart and that it lost.

    Judged only once the agent has been up for two heartbeats, so that the end reports of the
    pods it found finished at start-up (agent reconcile) have arrived first.
    """
    boot = _parse(beat.get("boot"))
    if boot is None or at - boot < timedelta(seconds=2 * settings.OPENDLC_HEARTBEAT_INTERVAL_S):
        return []
    known = set(beat.get("running_pod_ids") or ())
    lost = [pod_id for pod_id in Pod.objects.holding().filter(node__in=nodes, terminating=False, started_at__lt=boot)
            .values_list("pod_id", flat=True) if pod_id not in known]
    if lost:
        log.warning("agent %s restarted at %s without %d pod(s) it ran before: %s", beat.get("node") or "simulated",
                    boot.isoformat(), len(lost), ", ".join(lost[:10]))
        fail_lost_pods(lost, at, "the agent restarted and no longer runs the pod")
    return lost


def _refresh(nodes, at: datetime, now: datetime) -> None:
    # A heartbeat that waited in the broker must not move last_heartbeat backwards, nor revive a node.
    nodes.filter(Q(last_heartbeat__isnull=True) | Q(last_heartbeat__lt=at)).update(last_heartbeat=at)
    if at >= now - timedelta(seconds=settings.OPENDLC_NODE_LOST_AFTER_S):
        nodes.filter(status=NodeStatus.NOT_READY).update(status=NodeStatus.READY)


REAL_EXECUTORS = (Executor.PODMAN, Executor.DOCKER, Executor.PROCESS)


def _register(beat: dict, quota_id: int | None) -> Node:
    gpus = beat.get("gpus") or []
    executor = beat.get("executor") or Executor.PROCESS
    fields = {
        "hostname": beat.get("hostname", ""),
        "gpu_uuids": [g["uuid"] for g in gpus],
        # A real agent runs processes or containers; only the platform makes simulated nodes.
        "executor": executor if executor in REAL_EXECUTORS else Executor.PROCESS,
    }
    node = Node.objects.filter(name=beat["node"]).first()
    if node is None:
        with transaction.atomic():
            spec = spec_for_machine(beat.get("cpu", 1), beat.get("memory_mib", 1024), gpus)
            node, created = Node.objects.get_or_create(
                name=beat["node"], defaults={"spec": spec, "quota_id": quota_id, **fields}
            )
        if created:
            log.info("node %s registered as %s (%s)", node.name, spec.instance_type, node.pool_label)
            return node
    changed = {k: v for k, v in fields.items() if getattr(node, k) != v}
    if changed:
        Node.objects.filter(pk=node.pk).update(**changed)
    return node


def spec_for_machine(cpu: int, memory_mib: int, gpus: list[dict]) -> ResourceSpec:
    """The instance type of a machine shape, created the first time a machine of it registers."""
    gib = memory_mib // 1024
    spec, _ = ResourceSpec.objects.get_or_create(
        instance_type=f"local.c{cpu}m{gib}g{len(gpus)}",
        defaults={
            "cpu": cpu, "memory_mib": gib * 1024, "gpu": len(gpus),
            "gpu_type": gpus[0]["name"] if gpus else "", "on_demand_price_per_minute": Decimal("0"),
        },
    )
    return spec


def _stop_unwanted(node: Node, running_pod_ids: list[str]) -> None:
    """Stop pods the agent runs that the platform no longer wants (ended, replaced, lost, unknown)."""
    if not running_pod_ids:
        return
    wanted = set(
        Pod.objects.holding().filter(pod_id__in=running_pod_ids, node=node, current=True)
        .values_list("pod_id", flat=True)
    )
    for pod_id in set(running_pod_ids) - wanted:
        log.warning("node %s runs pod %s, which is not wanted there; stopping it", node.name, pod_id)
        _send_stop(node, pod_id)


def _send_stop(node: Node, pod_id: str) -> None:
    dispatch.send([dispatch.Message(dispatch.STOP_POD, {"pod_id": pod_id, "reason": dispatch.STOPPED, "grace_s": 0},
                                    node.queue)])


def reap_lost_nodes(now: datetime | None = None) -> list[str]:
    """Mark nodes without a recent heartbeat NotReady and fail their pods; returns the pod ids failed."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.OPENDLC_NODE_LOST_AFTER_S)
    stale = Node.objects.filter(last_heartbeat__lt=cutoff)
    for node in stale.filter(status=NodeStatus.READY):
        # Conditional update: a heartbeat processed meanwhile wins.
        if Node.objects.filter(pk=node.pk, status=NodeStatus.READY, last_heartbeat__lt=cutoff).update(
            status=NodeStatus.NOT_READY
        ):
            log.warning("node %s lost: no heartbeat since %s", node.name, node.last_heartbeat)
    lost = Pod.objects.holding().filter(node__in=stale.filter(status=NodeStatus.NOT_READY))
    pod_ids = list(lost.values_list("pod_id", flat=True))
    if not pod_ids:
        return []
    # Only pods still holding: one the agent reported finished meanwhile keeps its final status.
    Pod.objects.holding().filter(pod_id__in=pod_ids).exclude(status=PodStatus.UNKNOWN).update(
        status=PodStatus.UNKNOWN)
    fail_lost_pods(pod_ids, now, "the node stopped sending heartbeats")
    return pod_ids


def fail_lost_pods(pod_ids: list[str], now: datetime, message: str) -> None:
    """Unknown -> Failed (NodeLost) through the jobs engine, as if the agent had reported it: the
    engine frees the capacity, moves the job on and asks for a schedule cycle."""
    from jobs.lifecycle import apply_reports

    apply_reports([
        {"pod_id": p, "status": PodStatus.FAILED, "exit_code": None, "at": now.isoformat(), "reason": NODE_LOST,
         "message": message}
        for p in pod_ids
    ])


def _parse(value) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def drain(node: Node, message: str) -> list[str]:
    """Stop every pod holding the node, each with its job's grace period; returns their ids.

    The pods end Evicted, as preempted ones do, so AIMaster requeues a job with fault tolerance on
    (on other nodes: the caller has cordoned this one) and fails the others. Call it inside the
    transaction that cordoned the node.
    """
    pods = list(Pod.objects.holding().filter(node=node, terminating=False).values_list("pod_id", "job_id"))
    # Lock order: the jobs' rows first, then their pods (dispatch.stop_many).
    grace = dict(Job.objects.filter(pk__in={job for _, job in pods}).locked().values_list("pk", "termination_grace_s"))
    messages = dispatch.stop_many([dispatch.Stop(pod_id, dispatch.NODE_DRAINED, message, grace[job])
                                   for pod_id, job in pods], event=dispatch.NODE_DRAINED)
    stopped = {m.payload["pod_id"] for m in messages}
    JobEvent.objects.bulk_create(
        JobEvent(job_id=job, type=JobEvent.Type.WARNING, reason=dispatch.NODE_DRAINED, message=f"{message} (pod {pod_id})")
        for pod_id, job in pods if pod_id in stopped)
    dispatch.send_on_commit(messages)
    request_cycle()
    return sorted(stopped)
