"""End to end: a real platform worker and real agents run real pods through the broker.

Selected with `-m e2e`; they run in the default suite too. See tests/agent/live.py for how the
subprocesses share the test's database and broker (SQLite + filesystem, or PostgreSQL + Redis).
"""

import socket
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from prometheus_client.parser import text_string_to_metric_families

from jobs.logs import read_all
from jobs.models import Job, OversoldType, Pod
from jobs.nodes import reap_lost_nodes
from jobs.services import JobRequest, PodResources, RoleRequest, create_job
from quotas.models import Executor, Membership, Node, Quota, ResourceSpec, Role, Tenant, Workspace
from tests.agent import containers
from tests.agent.live import LiveCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture
def live(transactional_db, settings, tmp_path):
    cluster = LiveCluster(tmp_path, settings)
    yield cluster
    cluster.close()
    print(cluster.logs())  # shown when the test failed


@pytest.fixture
def team(transactional_db):
    """alice's workspace with two ECS quotas of one tree: team-a owns the nodes, team-b none.

    The nodes are provisioned in the console before their agents start (an agent attaching to a
    known node keeps its instance type), so they can claim two GPUs on this GPU-less machine.
    """
    alice = get_user_model().objects.create_user("alice", password="x")
    tenant = Tenant.objects.create(name="e2e")
    workspace = Workspace.objects.create(tenant=tenant, name="e2e-ws")
    Membership.objects.create(workspace=workspace, user=alice, role=Role.OWNER, is_default=True)
    root = Quota.objects.create(quota_id="quotae2eroot", name="root", tenant=tenant)
    a = Quota.objects.create(quota_id="quotae2ea", name="team-a", tenant=tenant, parent=root)
    b = Quota.objects.create(quota_id="quotae2eb", name="team-b", tenant=tenant, parent=root)
    for quota in (root, a, b):
        quota.workspaces.add(workspace)
    spec = ResourceSpec.objects.create(instance_type="e2e.c1m1g2", cpu=1, memory_mib=1024, gpu=2,
                                       gpu_type="test GPU", on_demand_price_per_minute=Decimal("0"))
    for name in ("e2e-a", "e2e-b"):
        Node.objects.create(name=name, spec=spec, quota=a, executor=Executor.PROCESS)
    return {"alice": alice, "a": a, "b": b}


def submit(team, command: str, *, quota="a", pods=1, oversold=None, grace_s=30, envs=None) -> Job:
    return create_job(team["alice"], JobRequest(
        display_name="e2e", user_command=command, quota_id=team[quota].quota_id, oversold_type=oversold,
        envs=envs or {},
        roles=[RoleRequest(pod_count=pods, instance_type="e2e.c1m1g2", image="local")], termination_grace_s=grace_s,
    ))


def status(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def registered(*names):
    return lambda: Node.objects.filter(name__in=names, last_heartbeat__isnull=False, status="Ready").count() == len(names)


def test_a_two_pod_job_runs_on_two_agents_sees_its_ranks_and_gpus_and_succeeds(live, team):
    live.start_platform()
    live.start_agent("e2e-a")
    live.start_agent("e2e-b")
    live.wait(registered("e2e-a", "e2e-b"), "both agents to register by heartbeat")
    node = Node.objects.get(name="e2e-a")
    assert (node.hostname, node.spec.instance_type) == (socket.gethostname(), "e2e.c1m1g2")

    job = submit(team, 'echo "rank=$RANK world=$WORLD_SIZE gpus=$CUDA_VISIBLE_DEVICES master=$MASTER_ADDR"', pods=2)
    live.wait(lambda: status(job) == "Succeeded", "the job to succeed")

    pods = list(Pod.objects.filter(job=job).select_related("node").order_by("index"))
    assert {p.node.name for p in pods} == {"e2e-a", "e2e-b"}
    for rank, pod in enumerate(pods):
        text = live.wait(lambda pod=pod: read_all(pod), f"the logs of {pod.pod_id}")
        gpus = ",".join(str(g) for g in pod.gpu_indices)
        assert gpus == "0,1"
        assert text == f"rank={rank} world=2 gpus={gpus} master={socket.gethostname()}\n"
        assert (pod.status, pod.exit_code) == ("Succeeded", 0)


def test_a_two_pod_job_runs_as_containers_of_its_image_on_two_podman_agents(live, team, tmp_path):
    from jobs.models import PodEvent

    podman = containers.podman_runtime()
    image = containers.build_image(podman, tmp_path)
    cpu_only = ResourceSpec.objects.create(instance_type="e2e.c1m1g0", cpu=1, memory_mib=1024, gpu=0,
                                           on_demand_price_per_minute=Decimal("0"))
    Node.objects.filter(name__in=("e2e-a", "e2e-b")).update(spec=cpu_only)
    live.start_platform()
    live.start_agent("e2e-a", runtime="podman")
    live.start_agent("e2e-b", runtime="podman")
    live.wait(registered("e2e-a", "e2e-b"), "both agents to register by heartbeat")
    assert set(Node.objects.values_list("executor", flat=True)) == {"podman"}
    # Rank 0 listens on MASTER_PORT; rank 1, on the other node's agent, reaches it at MASTER_ADDR.
    # Under load a connection may carry nothing: the master waits for one that does, the worker
    # sends a few times once one got through.
    command = (f'cat /etc/opendlc-image; if [ "$RANK" = 0 ]; then {containers.MASTER_LISTENS}; '
               f'else {containers.WORKER_SENDS}; fi')
    job = create_job(team["alice"], JobRequest(
        display_name="e2e-box", user_command=command, quota_id=team["a"].quota_id,
        roles=[RoleRequest(pod_count=2, instance_type="e2e.c1m1g0", image=image)]))
    live.wait(lambda: status(job) in ("Succeeded", "Failed"), "the job to end")
    assert status(job) == "Succeeded"
    master = Pod.objects.get(job=job, index=0)
    text = live.wait(lambda: read_all(master), "the master's log")
    assert containers.IMAGE_MARKER in text and "master got: hello from 1" in text
    started = PodEvent.objects.filter(pod__job=job, reason="Started").values_list("message", flat=True)
    assert all(m.endswith(f"podman container of {image}") for m in started) and len(started) == 2


def test_a_preempted_pod_flushes_in_its_grace_period_is_evicted_and_frees_the_node(live, team, tmp_path):
    live.start_platform()
    live.start_agent("e2e-a")
    live.wait(registered("e2e-a"), "the agent to register")
    Node.objects.filter(name="e2e-b").delete()  # one node: the owner's job needs the borrowed one

    flushed = tmp_path / "flushed"
    borrower = submit(team, f"trap 'sleep 0.5; echo saved > {flushed}; exit 0' TERM; echo started; "
                            "while true; do sleep 0.1; done", quota="b", oversold=OversoldType.FORCE, grace_s=20)
    idle_pod = Pod.objects.get(job=borrower)
    live.wait(lambda: "started" in read_all(idle_pod), "the idle pod to run")

    owner = submit(team, "echo reclaimed", quota="a")  # guaranteed: reclaims its quota's node
    live.wait(lambda: status(owner) == "Succeeded", "the owner's job to run on the freed node")

    idle_pod.refresh_from_db()
    assert flushed.read_text() == "saved\n"
    assert (idle_pod.status, idle_pod.sub_status, idle_pod.status_label) == ("Failed", "Evicted", "Resource Preempted")
    owner_pod = Pod.objects.select_related("node").get(job=owner)
    assert (owner_pod.node.name, owner_pod.status) == ("e2e-a", "Succeeded")
    assert owner_pod.bound_at >= idle_pod.finished_at  # placed only once the idle pod was gone
    assert status(borrower) == "Failed"


def test_a_killed_agent_makes_its_node_not_ready_and_its_pods_node_lost_and_a_restart_cleans_up(live, team):
    live.start_platform()
    live.start_agent("e2e-a")
    live.wait(registered("e2e-a"), "the agent to register")
    Node.objects.filter(name="e2e-b").delete()
    job = submit(team, "echo started; while true; do sleep 0.1; done")
    pod = Pod.objects.get(job=job)
    live.wait(lambda: "started" in read_all(pod), "the pod to run")

    live.kill("agent-e2e-a")  # SIGKILL: no goodbye, no more heartbeats; the pod runs on, orphaned
    assert live.pod_groups("e2e-a"), live.logs()
    lost = live.wait(reap_lost_nodes, "the reaper to find the node lost", timeout=30)

    pod.refresh_from_db()
    assert lost == [pod.pod_id]
    assert Node.objects.get(name="e2e-a").status == "NotReady"
    assert (pod.status, pod.sub_status, pod.reason_code) == ("Failed", "Normal", "NodeLost")
    assert status(job) == "Failed"

    # The agent comes back: the node is Ready again, and the pod the platform gave up on is stopped.
    live.start_agent("e2e-a")
    live.wait(registered("e2e-a"), "the node to be Ready again")
    live.wait(lambda: not live.pod_groups("e2e-a"), "the unwanted pod to be stopped")


def test_the_simulated_agent_runs_pods_of_every_simulated_node_for_their_declared_time(live, team):
    Node.objects.filter(name__in=["e2e-a", "e2e-b"]).update(executor=Executor.SIMULATED)
    live.start_platform()
    live.start_simulated_agent()
    live.wait(registered("e2e-a", "e2e-b"), "the simulated agent's heartbeat to keep both nodes alive")

    ok = submit(team, "train", pods=2, envs={"SIM_DURATION_S": "0.5"})
    live.wait(lambda: status(ok) == "Succeeded", "the simulated job to succeed")
    failing = submit(team, "train", envs={"SIM_DURATION_S": "0.1", "SIM_EXIT_CODE": "3"})
    live.wait(lambda: status(failing) == "Failed", "the simulated job to fail")

    assert sorted(Pod.objects.filter(job=ok).values_list("node__name", flat=True)) == ["e2e-a", "e2e-b"]
    assert list(Pod.objects.filter(job=failing).values_list("status", "exit_code")) == [("Failed", 3)]


def test_pods_with_their_own_resources_share_a_node_each_seeing_only_its_gpus(live, team):
    """ResourceConfig pods of one GPU each: both run as processes of one agent, on distinct GPUs."""
    wide = ResourceSpec.objects.create(instance_type="e2e.c4m4g2", cpu=4, memory_mib=4096, gpu=2,
                                       gpu_type="test GPU", on_demand_price_per_minute=Decimal("0"))
    Node.objects.filter(name__in=("e2e-a", "e2e-b")).delete()
    Node.objects.create(name="e2e-w", spec=wide, quota=team["a"], executor=Executor.PROCESS)
    live.start_platform()
    live.start_agent("e2e-w")
    live.wait(registered("e2e-w"), "the agent to register")

    job = create_job(team["alice"], JobRequest(
        display_name="e2e", user_command='echo "gpus=$CUDA_VISIBLE_DEVICES"', quota_id=team["a"].quota_id,
        roles=[RoleRequest(pod_count=2, image="local", resources=PodResources(gpu=1, cpu=2, memory_mib=2048))],
    ))
    live.wait(lambda: status(job) == "Succeeded", "the job to succeed")

    pods = list(Pod.objects.filter(job=job).select_related("node"))
    assert {p.node.name for p in pods} == {"e2e-w"}
    seen = sorted(live.wait(lambda pod=pod: read_all(pod), f"the logs of {pod.pod_id}") for pod in pods)
    assert seen == ["gpus=0\n", "gpus=1\n"]
    assert sorted(tuple(p.gpu_indices) for p in pods) == [(0,), (1,)]


def test_metrics_counted_by_the_worker_processes_reach_the_web_process_scrape(live, team, client, settings):
    # The platform worker (a Celery parent and its two children) admits, times cycles and starts
    # pods; /metrics, served here, adds up the files those processes wrote (console/metrics.py).
    settings.OPENDLC_METRICS_DIR = live.var / "prometheus"
    settings.OPENDLC_METRICS_TOKEN = "e2e"
    Node.objects.filter(name__in=["e2e-a", "e2e-b"]).update(executor=Executor.SIMULATED)
    live.start_platform()
    live.start_simulated_agent()
    live.wait(registered("e2e-a", "e2e-b"), "the simulated agent's heartbeat to keep both nodes alive")
    # Long enough that each pod's Running report is applied before its end: an end that overtakes
    # it leaves the pod's start untimed (the late Running report is ignored).
    job = submit(team, "train", pods=2, envs={"SIM_DURATION_S": "3"})
    live.wait(lambda: status(job) == "Succeeded", "the simulated job to succeed")

    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer e2e").content.decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("opendlc_admissions_total", (("kind", "guaranteed"),))] == 1
    assert samples[("opendlc_pod_start_latency_seconds_count", ())] == 2
    assert samples[("opendlc_schedule_cycle_duration_seconds_count", (("step", "total"),))] >= 1
    assert samples[("opendlc_quota_used_gpus", (("quota", "team-a"),))] == 0
