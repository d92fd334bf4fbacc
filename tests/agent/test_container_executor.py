"""The container executor runs each pod as a real container of its image (Podman here; Docker's client
through Podman's Docker API for the runtime-independent parts)."""

import json
import os
import signal
import subprocess
import time

import pytest

from agent import images
from agent.container import (
    ContainerExecutor,
    Runtime,
    container_name,
    create_args,
    kernel_oom_killed,
    podman_defaults_fail,
)
from agent.outbox import Outbox
from tests.agent import containers
from tests.agent.helpers import Recorder, wait_for


@pytest.fixture(scope="module")
def podman():
    return containers.podman_runtime()


@pytest.fixture(scope="module")
def image(podman, tmp_path_factory):
    return containers.build_image(podman, tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="module")
def docker(podman, image, tmp_path_factory):
    runtime, service = containers.docker_through_podman(podman, tmp_path_factory.mktemp("docker"))
    yield runtime
    os.killpg(service.pid, signal.SIGTERM)
    service.wait(30)


def make_executor(runtime, root, recorder, node="box-node"):
    ex = ContainerExecutor(node, root, Outbox(recorder, flush_s=0.02), runtime, ship_interval_s=0.1)
    ex.run()
    return ex


@pytest.fixture
def run(podman, image, tmp_path):
    """run(runtime=podman) -> (executor, recorder); every container it made is removed afterwards."""
    made = []

    def start(runtime=None):
        recorder = Recorder()
        ex = make_executor(runtime or podman, tmp_path / "pods", recorder)
        made.append((runtime or podman, ex))
        return ex, recorder

    yield start
    for runtime, ex in made:
        ex.close()
        ex.outbox.close()
        containers.remove_containers(runtime, ex.marker)


def pod(pod_id, command, image=containers.IMAGE, **extra):
    return {"pod_id": pod_id, "job_id": "job-c", "node": "box-node", "role": "Worker", "index": 0, "incarnation": 0,
            "command": command, "env": extra.pop("env", {"RANK": "0", "WORLD_SIZE": "1"}), "grace_s": 2,
            "executor": "podman", "max_running_time_s": None, "image": image, **extra}


def ended(recorder, pod_id, timeout=60):
    return wait_for(lambda: recorder.final_report(pod_id), timeout)


# -- what the command sees --------------------------------------------------------------------


def test_the_command_runs_in_the_image_with_the_job_environment(run, tmp_path):
    ex, rec = run()
    env = {"RANK": "1", "WORLD_SIZE": "1", "LR": "0.1", "API_TOKEN": "hidden-custom-env-value",
           "CUDA_VISIBLE_DEVICES": "", "OPENDLC_CKPT_DIR": str(tmp_path / "ckpt")}
    ex.start(pod("c-env", 'cat /etc/opendlc-image; echo "rank=$RANK lr=$LR token=$API_TOKEN ckpt=$OPENDLC_CKPT_DIR"; '
                          'test -e /usr/lib/python3 && echo host-python-seen; echo pod=$OPENDLC_POD_ID', env=env))
    report = ended(rec, "c-env")
    assert (report["status"], report["exit_code"]) == ("Succeeded", 0)
    text = rec.log_text("c-env")
    assert containers.IMAGE_MARKER in text  # the image's own file, which the host does not have
    assert "host-python-seen" not in text
    assert f"rank=1 lr=0.1 token=hidden-custom-env-value ckpt={tmp_path / 'ckpt'}" in text
    assert "pod=c-env" in text
    running = rec.reports("c-env")[0]
    assert running["status"] == "Running" and running["message"] == f"podman container of {containers.IMAGE}"
    # The env file the values went through is gone, and the container with it.
    assert not (tmp_path / "pods" / "job-c" / "c-env" / ".opendlc-env").exists()
    assert subprocess.run(["podman", "container", "exists", container_name("c-env", ex.marker)]).returncode == 1


def test_a_hidden_value_is_never_on_a_command_line(podman, tmp_path):
    spec = pod("c-args", "true", env={"API_TOKEN": "s3cret-value", "WORLD_SIZE": "1"})
    args = create_args(podman, spec, name="n", marker="m", env_file=tmp_path / "env", env_names=[],
                       mounts=[], ckpt_dir="/ckpt")
    assert not any("s3cret-value" in a for a in args)
    assert "--env-file" in args


def test_a_dataset_is_mounted_read_only_at_its_mount_path_and_the_code_source_at_its_own(run, tmp_path):
    data = tmp_path / "imagenet"
    (data / "train").mkdir(parents=True)
    (data / "train" / "n01440764.tar").write_text("x")
    ex, rec = run()
    ex.start(pod("c-data", "ls -R /mnt/data/; touch /mnt/data/new && echo WROTE || echo READ-ONLY",
                 data_sources=[{"data_source_id": "d-1", "uri": f"file://{data}", "mount_path": "/mnt/data/"}]))
    assert ended(rec, "c-data")["status"] == "Succeeded"
    text = rec.log_text("c-data")
    assert "/mnt/data/train:" in text and "n01440764.tar" in text and "READ-ONLY" in text
    assert not (data / "new").exists()


def test_the_code_source_is_cloned_on_the_node_and_mounted_at_its_path(run, tmp_path):
    from tests.agent.test_pod_sources import git

    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "--quiet", "--initial-branch=main", cwd=repo)
    (repo / "train.sh").write_text("echo training from the code source\n")
    git("add", ".", cwd=repo)
    git("commit", "--quiet", "-m", "one", cwd=repo)
    ex, rec = run()
    ex.start(pod("c-code", "sh /root/code/proj/train.sh; df -m /dev/shm | tail -1",
                 resources={"cpu_m": 500, "mem_mib": 256, "gpu": 0},
                 code_source={"code_source_id": "code-1", "repo": f"file://{repo}", "branch": "", "commit": "",
                              "mount_path": "/root/code/proj"}))
    assert ended(rec, "c-code")["status"] == "Succeeded"
    text = rec.log_text("c-code")
    assert "training from the code source" in text
    assert text.splitlines()[-1].split()[1] == "256"  # /dev/shm as large as the pod's memory


def test_a_missing_dataset_fails_the_pod_at_once(run, tmp_path):
    ex, rec = run()
    ex.start(pod("c-nodata", "true", data_sources=[
        {"data_source_id": "d-2", "uri": f"file://{tmp_path / 'absent'}", "mount_path": "/mnt/data"}]))
    report = ended(rec, "c-nodata", timeout=10)
    assert report["reason"] == "DataSourceMountFailed" and "does not exist on this node" in report["message"]


# -- life: exit codes, stops, memory, images ---------------------------------------------------


def test_the_exit_code_is_kept(run):
    ex, rec = run()
    ex.start(pod("c-exit", "echo failing >&2; exit 3"))
    report = ended(rec, "c-exit")
    assert (report["status"], report["exit_code"], report["reason"]) == ("Failed", 3, "Error")
    assert "failing" in rec.log_text("c-exit")


def test_a_stop_lets_the_command_flush_on_sigterm_inside_the_container(run, tmp_path):
    ckpt = tmp_path / "ckpt"
    ex, rec = run()
    # As EasyCkpt does: on SIGTERM, write the checkpoint, then exit. The command is not PID 1 and not
    # the shell the runtime signals, so this shows the signal reaches every process of the pod.
    command = ('trap \'echo step-41 > "$OPENDLC_CKPT_DIR/last"; echo flushed; exit 0\' TERM; '
               'echo ready; while true; do sleep 0.1; done')
    ex.start(pod("c-term", command, env={"WORLD_SIZE": "1", "OPENDLC_CKPT_DIR": str(ckpt)}))
    wait_for(lambda: "ready" in rec.log_text("c-term"))
    began = time.monotonic()
    ex.stop("c-term", "Preempted", 10)
    report = ended(rec, "c-term")
    assert time.monotonic() - began < 8  # it ended at the signal, not at the end of the grace period
    assert (report["reason"], report["exit_code"]) == ("Preempted", 0)
    assert (ckpt / "last").read_text() == "step-41\n"
    assert "flushed" in rec.log_text("c-term")


def test_easyckpt_flushes_on_preemption_inside_the_container_and_the_next_pod_resumes(run, podman, tmp_path_factory,
                                                                                      tmp_path):
    image = containers.build_python_image(podman, tmp_path_factory.mktemp("pyimage"))
    ckpt = tmp_path / "ckpt"
    ex, rec = run()
    # The repository is the pod's "dataset" (read-only): its example trains in pure Python.
    spec = dict(image=image, env={"WORLD_SIZE": "1", "OPENDLC_CKPT_DIR": str(ckpt)},
                data_sources=[{"data_source_id": "d-repo", "uri": f"file://{containers.REPO}",
                               "mount_path": "/opt/opendlc"}])
    command = "python3 /opt/opendlc/examples/train_easyckpt.py --steps 100000 --ckpt-every 1000 --sleep 0.01"
    ex.start(pod("c-ckpt-0", command, **spec))
    wait_for(lambda: "step=20 " in rec.log_text("c-ckpt-0"))
    ex.stop("c-ckpt-0", "Preempted", 20)
    report = ended(rec, "c-ckpt-0")
    assert (report["reason"], report["exit_code"]) == ("Preempted", 143)  # EasyCkpt's exit after its flush
    last = max(int(line.split()[0].split("=")[1]) for line in rec.log_text("c-ckpt-0").splitlines()
               if line.startswith("step="))
    # No periodic checkpoint was due (every 1000 steps): what the next pod resumes from is the flush.
    ex.start(pod("c-ckpt-1", command.replace("100000", str(last + 3)), **spec))
    assert ended(rec, "c-ckpt-1")["status"] == "Succeeded"
    text = rec.log_text("c-ckpt-1")
    assert f"resumed from step={last}" in text and f"step={last + 1} " in text and f"done at step={last + 3}" in text


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_period(run):
    ex, rec = run()
    ex.start(pod("c-stubborn", "trap '' TERM; echo ready; while true; do sleep 0.1; done"))
    wait_for(lambda: "ready" in rec.log_text("c-stubborn"))
    began = time.monotonic()
    ex.stop("c-stubborn", "Stopped", 2)
    report = ended(rec, "c-stubborn")
    assert time.monotonic() - began >= 1.9
    assert (report["reason"], report["exit_code"]) == ("Stopped", 137)


def test_an_out_of_memory_kill_is_reported_as_oomkilled(run):
    ex, rec = run()
    ex.start(pod("c-oom", "exec tail /dev/zero", resources={"cpu_m": 1000, "mem_mib": 16, "gpu": 0}))
    report = ended(rec, "c-oom")
    assert (report["status"], report["reason"], report["exit_code"]) == ("Failed", "OOMKilled", 137)
    assert "memory limit 16 MiB" in report["message"]


def test_a_sigkill_that_was_not_for_memory_is_not_called_oomkilled(run):
    ex, rec = run()
    ex.start(pod("c-kill9", "kill -KILL $$", resources={"cpu_m": 1000, "mem_mib": 64, "gpu": 0}))
    report = ended(rec, "c-kill9")
    assert (report["reason"], report["exit_code"]) == ("Error", 137)


def test_a_container_that_cannot_start_fails_the_pod_with_the_runtime_message(run):
    # This machine has no GPU and no CDI spec: the runtime refuses the device the pod was given.
    ex, rec = run()
    ex.start(pod("c-nogpu", "echo never", env={"WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": "0"}))
    report = ended(rec, "c-nogpu")
    assert (report["status"], report["reason"]) == ("Failed", "StartError")
    assert "nvidia.com/gpu" in report["message"]
    assert "never" not in rec.log_text("c-nogpu")


def _info(cgroup: str, runtime: str) -> str:
    return json.dumps({"host": {"cgroupVersion": cgroup, "ociRuntime": {"name": runtime}}})


def test_a_host_that_forbids_raising_the_open_files_limit_needs_the_bundled_podman_settings(tmp_path):
    nr_open = tmp_path / "nr_open"
    nr_open.write_text("1048576\n")

    def refused(limit):
        raise PermissionError(limit)

    tried = []
    why = podman_defaults_fail(_info("v2", "crun"), nr_open_path=str(nr_open), raise_limit=refused)
    fine = podman_defaults_fail(_info("v2", "crun"), nr_open_path=str(nr_open), raise_limit=tried.append)

    if os.geteuid() == 0:  # only root's Podman raises the limit
        assert why == "raising the open-files limit to 1048576 is not permitted"
        assert tried == [1048576]
    else:
        assert why is None
    assert fine is None


def test_the_probe_leaves_the_agents_own_limit_as_it_was(tmp_path):
    import resource

    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    nr_open = tmp_path / "nr_open"
    nr_open.write_text(str(before[1]))  # a limit the child may always set
    assert podman_defaults_fail(_info("v2", "runc"), nr_open_path=str(nr_open)) is None
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == before


def test_kernel_oom_records_are_matched_by_container_id(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("6,1,1,-;oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/libpod_parent/libpod-abc123,task=tail\n")
    assert kernel_oom_killed("abc123", str(log))
    assert not kernel_oom_killed("def456", str(log))
    assert not kernel_oom_killed("abc123", str(tmp_path / "unreadable"))


def test_an_image_that_cannot_be_pulled_fails_the_pod_at_once_with_the_runtime_message(run):
    ex, rec = run()
    began = time.monotonic()
    ex.start(pod("c-noimage", "true", image="localhost/opendlc-test/absent:1"))
    report = ended(rec, "c-noimage", timeout=60)
    assert time.monotonic() - began < 30
    assert (report["status"], report["reason"]) == ("Failed", "ImagePullFailed")
    assert "localhost/opendlc-test/absent:1" in report["message"] and "localhost" in report["message"]


def test_registry_credentials_go_to_a_private_auth_file_and_never_into_messages(run):
    ex, rec = run()
    config = {"DockerRegistry": "localhost:5999", "Username": "robot", "Password": "pull-s3cret"}
    ex.start(pod("c-private", "true", image="localhost:5999/team/private:1", image_config=config))
    report = ended(rec, "c-private")
    assert report["reason"] == "ImagePullFailed"
    assert "pull-s3cret" not in str(rec.sent)


def test_the_auth_file_holds_the_credentials_for_the_registry_only_for_the_agent(tmp_path):
    path = images.auth_file(tmp_path / "auth", "reg.example.com/team/x:1", {"Username": "u", "Password": "p"})
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert path.read_text() == '{"auths": {"reg.example.com": {"auth": "dTpw"}}}'
    assert images.credentials({"Auth": "dTpw"}) == ("u", "p")
    assert images.auth_file(tmp_path / "none", "x:1", {}) is None


# -- several pods, GPUs, restart --------------------------------------------------------------


def test_a_two_pod_job_reaches_its_master_over_the_host_network(run):
    ex, rec = run()
    port = 20000 + os.getpid() % 20000
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    ex.start(pod("c-master", containers.MASTER_LISTENS, env={**env, "RANK": "0"}))
    ex.start(pod("c-worker", containers.WORKER_SENDS, env={**env, "RANK": "1"}))
    assert ended(rec, "c-worker")["status"] == "Succeeded"
    assert ended(rec, "c-master")["status"] == "Succeeded"
    assert "master got: hello from 1" in rec.log_text("c-master")


def test_a_running_container_is_sampled_through_its_main_process_group(run):
    from agent.metrics import PodSampler, group_usage

    ex, rec = run()
    # Busy for a while, then idle: the sample sees the container's own processes use the CPU.
    ex.start(pod("c-busy", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo busy-done; sleep 30"))
    (target,) = wait_for(lambda: ex.metric_targets())
    assert target.pod_id == "c-busy" and target.gpus == ()
    wait_for(lambda: "busy-done" in rec.log_text("c-busy"))
    cpu_s, rss_mib = group_usage(target.pgid)
    assert cpu_s > 0.05 and rss_mib > 0
    assert PodSampler().sample([target]) == []  # the first sample only sets the rate's start
    ex.stop("c-busy", "Stopped", 1)
    ended(rec, "c-busy")


def test_gpus_are_passed_as_cdi_devices_to_podman_and_as_gpus_to_docker(tmp_path):
    spec = pod("g", "nvidia-smi", env={"CUDA_VISIBLE_DEVICES": "2,5", "WORLD_SIZE": "1"},
               resources={"cpu_m": 8000, "mem_mib": 65536, "gpu": 2})
    kw = dict(name="n", marker="m", env_file=tmp_path / "env", env_names=[], mounts=[], ckpt_dir="/ckpt")
    podman_args = create_args(Runtime("podman", "/usr/bin/podman"), spec, **kw)
    docker_args = create_args(Runtime("docker", "/usr/bin/docker"), spec, **kw)
    assert " ".join(podman_args).count("--device nvidia.com/gpu=") == 2
    assert "--device nvidia.com/gpu=2 --device nvidia.com/gpu=5" in " ".join(podman_args)
    assert '--gpus "device=2,5"' in " ".join(docker_args) and "--device" not in docker_args
    for args in (podman_args, docker_args):
        joined = " ".join(args)
        assert "--cpus 8 " in joined and "--memory 65536m --memory-swap 65536m" in joined
        assert "--shm-size 65536m" in joined and "--network" not in args  # one pod: no host network
    assert "--gpus" not in create_args(Runtime("docker", "d"), pod("c", "true"), **kw)


def test_inside_the_container_cuda_counts_its_own_gpus_from_zero(run):
    from agent.container import container_env
    env = container_env(pod("g", "true", env={"CUDA_VISIBLE_DEVICES": "2,5", "WORLD_SIZE": "1"}))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["NVIDIA_VISIBLE_DEVICES"] == "2,5"
    assert container_env(pod("g", "true"))["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_a_restarted_agent_adopts_its_running_container_and_removes_unknown_ones(run, podman, tmp_path):
    # An agent that died while its pod ran: its state lists the pod, nobody watches it, and its
    # attached client died with it; the container lives on.
    dead, _ = run()
    started = dead._spawn(pod("c-long", "echo started; while true; do echo tick; sleep 0.2; done"), [])
    dead.pods["c-long"] = started
    dead._save_state()
    log_file = tmp_path / "pods" / "job-c" / "c-long" / "pod.log"
    wait_for(lambda: b"tick" in log_file.read_bytes())
    os.killpg(started.pgid, signal.SIGKILL)
    # A container with our label that no pod of ours owns (its start was lost): removed at reconcile.
    subprocess.run([podman.binary, "create", "--name", "opendlc-stray", "--label",
                    f"io.opendlc.agent={dead.marker}", containers.IMAGE, "true"], check=True, capture_output=True)
    second, rec2 = run()
    assert second.running_pod_ids() == ["c-long"]
    assert subprocess.run([podman.binary, "container", "exists", "opendlc-stray"]).returncode == 1
    # The adopted pod's log goes on from where the old agent stopped, and a stop still ends it.
    before = log_file.stat().st_size
    wait_for(lambda: log_file.stat().st_size > before)
    second.stop("c-long", "Stopped", 1)
    assert ended(rec2, "c-long")["reason"] == "Stopped"


def test_a_container_that_ended_while_the_agent_was_away_is_reported(run):
    dead, _ = run()
    started = dead._spawn(pod("c-short", "sleep 1; exit 5"), [])
    dead.pods["c-short"] = started
    dead._save_state()

    def running():
        return subprocess.run(["podman", "inspect", "--format", "{{.State.Running}}", started.container],
                              capture_output=True, text=True).stdout.strip()

    wait_for(lambda: running() == "true")
    os.killpg(started.pgid, signal.SIGKILL)
    wait_for(lambda: running() == "false")
    second, rec2 = run()
    report = ended(rec2, "c-short")
    assert (report["status"], report["exit_code"]) == ("Failed", 5)


# -- Docker's client ---------------------------------------------------------------------------


def test_docker_runs_the_pod_with_its_environment_mounts_and_exit_code(run, docker, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("x")
    ex, rec = run(docker)
    assert ex.kind == "docker"
    ex.start(pod("d-run", "cat /etc/opendlc-image; ls /mnt/data; echo lr=$LR; exit 4",
                 env={"LR": "0.5", "WORLD_SIZE": "1"},
                 data_sources=[{"data_source_id": "d-1", "uri": f"file://{data}", "mount_path": "/mnt/data"}]))
    report = ended(rec, "d-run")
    assert (report["status"], report["exit_code"]) == ("Failed", 4)
    text = rec.log_text("d-run")
    assert containers.IMAGE_MARKER in text and "a.txt" in text and "lr=0.5" in text


def test_docker_stops_with_the_grace_period(run, docker):
    ex, rec = run(docker)
    ex.start(pod("d-stop", "trap 'echo flushed; exit 0' TERM; echo ready; while true; do sleep 0.1; done"))
    wait_for(lambda: "ready" in rec.log_text("d-stop"))
    ex.stop("d-stop", "Stopped", 10)
    report = ended(rec, "d-stop")
    assert (report["reason"], report["exit_code"]) == ("Stopped", 0) and "flushed" in rec.log_text("d-stop")


# -- choosing the runtime -----------------------------------------------------------------------


def test_the_agent_runs_containers_where_a_runtime_works_and_says_why_one_it_was_asked_for_does_not(
        podman, tmp_path, monkeypatch, settings):
    from django.core.management.base import CommandError

    from agent.process import ProcessExecutor
    from console.management.commands.agent import pod_executor

    settings.OPENDLC_POD_ROOT = tmp_path / "pods"
    outbox = Outbox(Recorder())
    try:
        chosen = pod_executor(None, "n1", outbox)
        assert isinstance(chosen, ContainerExecutor) and chosen.kind == "podman"
        assert type(pod_executor("process", "n1", outbox, pod_user="")) is ProcessExecutor
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
        monkeypatch.setenv("PATH", os.environ["PATH"] if containers.shutil.which("docker") else "/nonexistent")
        with pytest.raises(CommandError, match="--runtime docker: "):
            pod_executor("docker", "n1", outbox)
        monkeypatch.setenv("PATH", str(tmp_path))  # neither client is found: processes, said in the log
        assert type(pod_executor(None, "n1", outbox, pod_user="")) is ProcessExecutor
    finally:
        outbox.close()
