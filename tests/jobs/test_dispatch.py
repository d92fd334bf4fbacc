import pytest
from django.conf import settings

from jobs.dispatch import PREEMPTED, STOPPED, Stop, master_port, stop_many
from jobs.dispatch import send as real_send  # before the autouse fixture replaces it
from jobs.models import Pod, PodEvent
from jobs.services import RoleRequest, create_job
from quotas.models import Executor, Node
from tests.jobs.conftest import V100, bound_jobs, make_request


def role(name, pods):
    return RoleRequest(role=name, pod_count=pods, instance_type=V100, image="pytorch:2.5")


def test_start_messages_carry_the_gang_layout_the_gpus_and_the_job_envs(bob, cycle, sent):
    Node.objects.filter(name="nlp-team-gn6v-c8g1-0").update(executor=Executor.PROCESS, hostname="gpu-a.lab")
    job = create_job(bob, make_request(roles=[role("Master", 1), role("Worker", 1)],
                                       envs={"EPOCHS": "3", "RANK": "user value loses"}, max_running_time_minutes=5))
    cycle()
    starts = {m.payload["pod_id"]: m for m in sent}
    master, worker = starts[f"{job.job_id}-master-0"], starts[f"{job.job_id}-worker-0"]
    assert master.queue == "agent.nlp-team-gn6v-c8g1-0" and worker.queue == "agent.simulated"
    assert master.payload["executor"] == "process" and worker.payload["executor"] == "simulated"
    assert master.payload["command"] == "python train.py" and master.payload["max_running_time_s"] == 300
    assert master.payload["incarnation"] == 0 and master.payload["grace_s"] == 30
    env = worker.payload["env"]
    assert env["EPOCHS"] == "3" and env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["LOCAL_RANK"] == "0"
    assert env["MASTER_ADDR"] == "gpu-a.lab" and env["MASTER_PORT"] == str(master_port(job.job_id))
    assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # the indices are NVML's
    assert env["OPENDLC_JOB_ID"] == job.job_id and env["OPENDLC_POD_ID"] == worker.payload["pod_id"]
    assert env["OPENDLC_CKPT_DIR"] == f"{settings.OPENDLC_POD_ROOT}/{job.job_id}/checkpoints"
    assert master.payload["env"]["RANK"] == "0"


def test_a_pod_without_gpus_sees_none_and_the_master_falls_back_to_localhost(alice, cycle, sent):
    request = make_request(source="public", quota_id=None,
                           roles=[RoleRequest(instance_type="ecs.g7.xlarge", image="python:3.12")])
    create_job(alice, request)
    cycle()
    (message,) = sent
    assert message.payload["env"]["CUDA_VISIBLE_DEVICES"] == "" and message.payload["env"]["MASTER_ADDR"] == "127.0.0.1"
    assert message.payload["max_running_time_s"] is None


def test_the_master_port_is_stable_and_in_range():
    assert master_port("dlcabc") == master_port("dlcabc")
    assert 20000 <= master_port("dlcabc") < 40000


def test_send_puts_consecutive_messages_of_one_kind_for_one_queue_in_one_task_in_order(monkeypatch):
    from console.celery import app
    from jobs import dispatch

    tasks = []
    monkeypatch.setattr(app, "send_task", lambda name, args, queue: tasks.append((name, queue, args[0])))
    monkeypatch.setattr(dispatch.agents, "seal_for", lambda queue, task, items: items)  # sealing: tests/agent/test_auth.py
    monkeypatch.setattr(dispatch, "MAX_BATCH", 3)
    stop = [dispatch.Message(dispatch.STOP_POD, {"pod_id": f"s{i}"}, "agent.simulated") for i in range(2)]
    start = [dispatch.Message(dispatch.START_POD, {"pod_id": f"a{i}"}, "agent.simulated") for i in range(4)]
    other = [dispatch.Message(dispatch.START_POD, {"pod_id": "b0"}, "agent.gpu-a")]

    real_send(stop + start + other + start[:1])

    assert [(name, queue, [p["pod_id"] for p in batch]) for name, queue, batch in tasks] == [
        ("agent.stop_pods", "agent.simulated", ["s0", "s1"]),
        ("agent.start_pods", "agent.simulated", ["a0", "a1", "a2"]),
        ("agent.start_pods", "agent.simulated", ["a3"]),
        ("agent.start_pods", "agent.gpu-a", ["b0"]),
        ("agent.start_pods", "agent.simulated", ["a0"]),
    ]


def test_a_broker_error_loses_only_that_task(monkeypatch, caplog):
    from console.celery import app
    from jobs import dispatch

    tasks = []

    def flaky(name, args, queue):
        if queue == "agent.down":
            raise ConnectionError("broker unreachable")
        tasks.append(queue)

    monkeypatch.setattr(app, "send_task", flaky)
    monkeypatch.setattr(dispatch.agents, "seal_for", lambda queue, task, items: items)
    real_send([dispatch.Message(dispatch.START_POD, {"pod_id": "a"}, "agent.down"),
               dispatch.Message(dispatch.START_POD, {"pod_id": "b"}, "agent.up")])
    assert tasks == ["agent.up"] and "could not send agent.start_pods for 1 pods (a, ...) to agent.down" in caplog.text


def test_stopping_the_pods_of_many_jobs_takes_the_same_few_statements(cluster, cycle, django_assert_max_num_queries):
    """A busy cycle preempts dozens of pods: three statements for any number (lock, claim, events)."""
    jobs = bound_jobs(cluster, cycle, [1, 1] + [4] * 10)
    few = [Stop(p.pod_id, PREEMPTED, "reclaimed by quota cv-team", 30) for job in jobs[:2] for p in job.pods.all()]
    many = [Stop(p.pod_id, STOPPED, "Job stopped", 5) for job in jobs[2:] for p in job.pods.all()]
    with django_assert_max_num_queries(3):
        assert [m.payload["pod_id"] for m in stop_many(few, event="Resource Preempted")] == [s.pod_id for s in few]
    with django_assert_max_num_queries(3):
        messages = stop_many(many)
    assert len(messages) == 40 and {(m.task, m.payload["reason"], m.payload["grace_s"]) for m in messages} == {
        ("agent.stop_pods", STOPPED, 5)}
    assert Pod.objects.filter(terminating=True).count() == 42
    assert PodEvent.objects.filter(reason="Resource Preempted", type="Warning").count() == 2
    assert PodEvent.objects.filter(reason="Stopping", type="Normal").count() == 40


def test_a_pod_already_stopping_keeps_its_first_reason_and_gets_no_second_message(cluster, cycle):
    (job,) = bound_jobs(cluster, cycle, [2])
    first, second = job.pods.order_by("index")
    assert len(stop_many([Stop(first.pod_id, PREEMPTED, "reclaimed", 30)])) == 1
    messages = stop_many([Stop(first.pod_id, STOPPED, "Job stopped", 30), Stop(second.pod_id, STOPPED, "Job stopped", 30)])
    assert [m.payload["pod_id"] for m in messages] == [second.pod_id]
    first.refresh_from_db()
    assert (first.reason_code, first.reason_message) == (PREEMPTED, "reclaimed")
    with pytest.raises(ValueError, match="stop reason must be one of"):
        Stop(first.pod_id, "Tired", "", 30)


def test_custom_envs_reach_the_pods_and_win_over_envs_of_the_same_name(bob, cycle, sent):
    from jobs.services import CustomEnv

    create_job(bob, make_request(envs={"EPOCHS": "3", "TOKEN": "from Envs"}, custom_envs=[
        CustomEnv("TOKEN", "s3cret", visible=False), CustomEnv("MODE", "fast")]))
    cycle()
    (message,) = sent
    env = message.payload["env"]
    assert (env["EPOCHS"], env["TOKEN"], env["MODE"]) == ("3", "s3cret", "fast")


def test_start_messages_carry_each_roles_image_its_registry_credentials_and_the_pods_resources(bob, cycle, sent):
    Node.objects.filter(name="nlp-team-gn6v-c8g1-0").update(executor=Executor.PODMAN, hostname="gpu-a.lab")
    master = RoleRequest(role="Master", pod_count=1, instance_type=V100, image="reg.example.com/team/ps:1",
                         image_config={"DockerRegistry": "reg.example.com", "Username": "robot", "Password": "pw"})
    job = create_job(bob, make_request(roles=[master, role("Worker", 1)]))
    cycle()
    starts = {m.payload["pod_id"]: m.payload for m in sent}
    first, second = starts[f"{job.job_id}-master-0"], starts[f"{job.job_id}-worker-0"]
    assert first["executor"] == "podman" and first["image"] == "reg.example.com/team/ps:1"
    assert first["image_config"] == {"DockerRegistry": "reg.example.com", "Username": "robot", "Password": "pw"}
    assert second["image"] == "pytorch:2.5" and second["image_config"] == {}
    pod = Pod.objects.get(pod_id=first["pod_id"])
    assert first["resources"] == {"cpu_m": pod.cpu_m, "mem_mib": pod.mem_mib, "gpu": pod.gpu} and pod.mem_mib > 0


@pytest.mark.parametrize(("image", "config", "field", "says"), [
    ("Pytorch:2", {}, "roles[0].image", "is not a valid image reference"),
    ("pytorch:2 --privileged", {}, "roles[0].image", "is not a valid image reference"),
    ("", {}, "roles[0].image", "is required"),
    ("pytorch:2", {"Username": "robot"}, "roles[0].image_config", "give Username and Password together"),
    ("pytorch:2", {"Auth": "not base64!"}, "roles[0].image_config", "Auth must be base64 of username:password"),
    ("pytorch:2", {"Token": "x"}, "roles[0].image_config", "unknown keys ['Token']"),
])
def test_an_image_that_is_not_a_reference_or_credentials_that_cannot_pull_are_refused(bob, image, config, field, says):
    from jobs.services import ValidationFailed

    with pytest.raises(ValidationFailed) as info:
        create_job(bob, make_request(roles=[RoleRequest(instance_type=V100, image=image, image_config=config)]))
    assert says in info.value.errors[field]


def test_a_start_no_agent_acknowledged_is_sent_again_the_same_and_only_that(bob, cycle, sent, reports):
    from datetime import timedelta

    from jobs.dispatch import resend_unstarted

    job = create_job(bob, make_request(roles=[role("Master", 1), role("Worker", 1)]))
    cycle()
    first = {m.payload["pod_id"]: m for m in sent}
    master, worker = f"{job.job_id}-master-0", f"{job.job_id}-worker-0"
    assert set(first) == {master, worker}
    bound = Pod.objects.get(pod_id=master).bound_at
    later = bound + timedelta(seconds=settings.OPENDLC_START_RESEND_AFTER_S + 1)
    sent.clear()

    assert resend_unstarted(bound + timedelta(seconds=settings.OPENDLC_START_RESEND_AFTER_S - 1)) == [] and sent == []
    reports({"pod_id": master, "status": "Running"})  # this one's agent got its start
    assert resend_unstarted(later) == [worker]
    (again,) = sent
    assert again.queue == first[worker].queue and again.payload == first[worker].payload  # same rank, same GPUs
    Node.objects.filter(pods__pod_id=worker).update(status="NotReady")  # the lost-node path owns it now
    assert resend_unstarted(later) == []
