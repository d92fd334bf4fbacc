"""The platform side of the agents: heartbeats register and refresh nodes; silent nodes are lost."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import nodes
from jobs.agents import Sender
from jobs.models import Pod
from quotas.models import Executor, Node, NodeStatus, Quota, ResourceSpec, Tenant

pytestmark = pytest.mark.django_db


def beat(name="gpu-box-1", at=None, **extra):
    return {
        "node": name, "hostname": "gpu-box-1.lan", "executor": "process", "cpu": 16, "memory_mib": 64 * 1024 + 300,
        "gpus": [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA A10", "memory_mib": 24576} for i in range(2)],
        "running_pod_ids": [], "at": (at or timezone.now()).isoformat(), **extra,
    }


def heartbeat(payload: dict, quota=None):
    """A heartbeat as the task hands it on, verified as its node's own (jobs/agents.py)."""
    return nodes.record_heartbeat(payload, Sender(payload["node"] or "simulated", quota.pk if quota else None))


def test_the_first_heartbeat_of_a_new_machine_registers_it_as_a_ready_node_in_the_public_pool():
    node = heartbeat(beat())
    assert (node.name, node.status, node.executor, node.quota) == ("gpu-box-1", "Ready", "process", None)
    assert node.gpu_uuids == ["GPU-0", "GPU-1"] and node.hostname == "gpu-box-1.lan"
    spec = node.spec
    assert (spec.instance_type, spec.cpu, spec.memory_mib, spec.gpu, spec.gpu_type) == (
        "local.c16m64g2", 16, 64 * 1024, 2, "NVIDIA A10")
    assert spec.on_demand_price_per_minute == 0
    assert node.last_heartbeat is not None


def test_machines_of_the_same_shape_share_one_instance_type():
    heartbeat(beat("a"))
    heartbeat(beat("b"))
    assert ResourceSpec.objects.filter(instance_type__startswith="local.").count() == 1


def test_a_node_registered_into_a_quota_joins_that_quota_whatever_its_agent_asks():
    quota = Quota.objects.create(quota_id="quota00000001", name="nlp-team", tenant=Tenant.objects.create(name="t"))
    Quota.objects.create(quota_id="quota00000002", name="other", tenant=Tenant.objects.create(name="u"))
    assert heartbeat(beat(quota="other"), quota=quota).quota == quota


def test_a_heartbeat_brings_a_lost_node_back_but_an_old_one_does_not():
    node = heartbeat(beat())
    Node.objects.filter(pk=node.pk).update(status=NodeStatus.NOT_READY)
    heartbeat(beat(at=timezone.now() - timedelta(hours=1)))
    assert Node.objects.get(pk=node.pk).status == "NotReady"
    heartbeat(beat())
    assert Node.objects.get(pk=node.pk).status == "Ready"


def test_an_old_heartbeat_does_not_move_the_last_heartbeat_backwards():
    now = timezone.now()
    heartbeat(beat(at=now))
    heartbeat(beat(at=now - timedelta(seconds=30)))
    assert Node.objects.get(name="gpu-box-1").last_heartbeat == now


def test_the_simulated_agents_heartbeat_keeps_every_simulated_node_alive(spec):
    for name in ("sim-1", "sim-2"):
        Node.objects.create(name=name, spec=spec, executor=Executor.SIMULATED, status=NodeStatus.NOT_READY)
    assert heartbeat({"node": None, "executor": "simulated", "at": timezone.now().isoformat()}) is None
    assert set(Node.objects.values_list("status", flat=True)) == {"Ready"}
    assert Node.objects.filter(last_heartbeat__isnull=True).count() == 0


def test_a_pod_the_agent_runs_but_the_platform_no_longer_wants_is_stopped(make_pod, monkeypatch):
    sent = []
    monkeypatch.setattr(nodes, "_send_stop", lambda node, pod_id: sent.append((node.queue, pod_id)))
    node = heartbeat(beat())
    running, finished = make_pod(node), make_pod(node, status="Failed")
    heartbeat(beat(running_pod_ids=[running.pod_id, finished.pod_id, "dlc-unknown"]))
    assert set(sent) == {("agent.gpu-box-1", "dlc-unknown"), ("agent.gpu-box-1", finished.pod_id)}


def test_a_node_without_heartbeats_becomes_not_ready_and_its_pods_fail_with_node_lost(make_pod, settings):
    settings.OPENDLC_NODE_LOST_AFTER_S = 30
    lost = heartbeat(beat("lost", at=timezone.now() - timedelta(seconds=31)))
    alive = heartbeat(beat("alive"))
    running, pending, done = make_pod(lost), make_pod(lost, status="Pending"), make_pod(lost, status="Succeeded")
    elsewhere = make_pod(alive)

    failed = nodes.reap_lost_nodes()

    assert sorted(failed) == sorted([running.pod_id, pending.pod_id])
    assert Node.objects.get(name="lost").status == "NotReady"
    assert Node.objects.get(name="alive").status == "Ready"
    for pod in (running, pending):
        pod.refresh_from_db()
        assert (pod.status, pod.sub_status, pod.reason_code) == ("Failed", "Normal", "NodeLost")
    for pod, status in ((done, "Succeeded"), (elsewhere, "Running")):
        pod.refresh_from_db()
        assert pod.status == status


def test_nodes_that_never_sent_a_heartbeat_are_not_reaped(spec, settings):
    settings.OPENDLC_NODE_LOST_AFTER_S = 0
    Node.objects.create(name="seeded", spec=spec)
    assert nodes.reap_lost_nodes() == []
    assert Node.objects.get(name="seeded").status == "Ready"


def test_a_node_records_which_runtime_its_agent_runs_pods_with_and_never_calls_itself_simulated():
    assert heartbeat(beat("c", executor="podman")).executor == "podman"
    assert heartbeat(beat("d", executor="docker")).executor == "docker"
    # Only the platform makes simulated nodes: an agent saying so would take the simulated queue.
    assert heartbeat(beat("e", executor="simulated")).executor == "process"


def started(pod, at):
    Pod.objects.filter(pk=pod.pk).update(started_at=at)
    return pod


def reason(pod):
    pod.refresh_from_db()
    return pod.status, pod.reason_code


def test_a_restarted_agent_loses_only_the_pods_it_ran_before_and_neither_adopted_nor_reported(make_pod, settings):
    settings.OPENDLC_HEARTBEAT_INTERVAL_S = 10
    now = timezone.now()
    node = heartbeat(beat())
    boot = now - timedelta(seconds=25)
    adopted = started(make_pod(node), boot - timedelta(minutes=5))
    lost = started(make_pod(node), boot - timedelta(minutes=5))
    since = started(make_pod(node), boot + timedelta(seconds=1))
    queued = make_pod(node, status="Pending")  # its start message waited in the broker through the restart

    heartbeat(beat(at=now, boot=boot.isoformat(), running_pod_ids=[adopted.pod_id, since.pod_id]))

    assert reason(lost) == ("Failed", "NodeLost")
    assert lost.reason_message == "the agent restarted and no longer runs the pod"
    assert [reason(p) for p in (adopted, since, queued)] == [("Running", ""), ("Running", ""), ("Pending", "")]


def test_orphans_wait_until_the_agent_has_been_up_for_two_heartbeats(make_pod, settings):
    settings.OPENDLC_HEARTBEAT_INTERVAL_S = 10
    now = timezone.now()
    node = heartbeat(beat())
    pod = started(make_pod(node), now - timedelta(minutes=5))
    # Just restarted: the end reports of the pods it found finished may still be on their way.
    heartbeat(beat(at=now, boot=(now - timedelta(seconds=5)).isoformat()))
    assert reason(pod) == ("Running", "")
    heartbeat(beat(at=now, boot=(now - timedelta(seconds=20)).isoformat()))
    assert reason(pod) == ("Failed", "NodeLost")


def test_a_restarted_simulated_agent_gives_up_every_pod_it_ran_before(make_pod, spec, settings):
    settings.OPENDLC_HEARTBEAT_INTERVAL_S = 10
    now = timezone.now()
    sim = Node.objects.create(name="sim-1", spec=spec, executor=Executor.SIMULATED)
    real = heartbeat(beat())
    before = started(make_pod(sim), now - timedelta(minutes=5))
    after = started(make_pod(sim), now - timedelta(seconds=5))
    elsewhere = started(make_pod(real), now - timedelta(minutes=5))

    heartbeat({"node": None, "executor": "simulated", "at": now.isoformat(),
               "boot": (now - timedelta(seconds=30)).isoformat()})

    assert [reason(p) for p in (before, after, elsewhere)] == [("Failed", "NodeLost"), ("Running", ""), ("Running", "")]


def test_simulated_nodes_go_not_ready_when_their_agent_stops_beating(make_pod, spec, settings):
    settings.OPENDLC_NODE_LOST_AFTER_S = 30
    sim = Node.objects.create(name="sim-1", spec=spec, executor=Executor.SIMULATED)
    heartbeat({"node": None, "executor": "simulated", "at": (timezone.now() - timedelta(seconds=31)).isoformat()})
    pod = make_pod(sim)
    assert nodes.reap_lost_nodes() == [pod.pod_id]
    assert Node.objects.get(name="sim-1").status == "NotReady" and reason(pod) == ("Failed", "NodeLost")
