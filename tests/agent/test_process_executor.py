"""The process executor runs real `bash -c` pods in their own process groups."""

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest


from agent import procs
from agent.outbox import Outbox
from tests.agent.helpers import wait_for



def pod(pod_id, command, **extra):
    return {"pod_id": pod_id, "job_id": "job-1", "node": "unit-node", "role": "Worker", "index": 0,
            "incarnation": 0, "command": command, "env": extra.pop("env", {}), "grace_s": 2,
            "executor": "process", "max_running_time_s": None, **extra}


def ended(recorder, pod_id, timeout=10):
    return wait_for(lambda: recorder.final_report(pod_id), timeout)


def test_it_runs_the_command_with_the_given_environment_in_the_pod_directory(executor, recorder, tmp_path):
    env = {"RANK": "1", "WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "2,3", "MASTER_ADDR": "127.0.0.1"}
    executor.start(pod("p-env", 'echo "rank=$RANK of $WORLD_SIZE gpus=$CUDA_VISIBLE_DEVICES at $MASTER_ADDR"; pwd', env=env))
    report = ended(recorder, "p-env")
    assert report["status"] == "Succeeded" and report["exit_code"] == 0
    assert recorder.reports("p-env")[0]["status"] == "Running"
    text = recorder.log_text("p-env")
    assert "rank=1 of 2 gpus=2,3 at 127.0.0.1" in text
    assert str(tmp_path / "pods" / "job-1" / "p-env") in text


def test_it_gives_each_job_a_stable_checkpoint_directory_unless_the_platform_names_one(executor, recorder, tmp_path):
    executor.start(pod("p-ckpt", 'echo "ckpt=$OPENDLC_CKPT_DIR"'))
    ended(recorder, "p-ckpt")
    assert f"ckpt={tmp_path / 'pods' / 'job-1' / 'checkpoints'}" in recorder.log_text("p-ckpt")


def test_a_resize_in_place_reaches_the_running_pod_through_its_membership_file(executor, recorder, tmp_path):
    membership = tmp_path / "pods" / "job-1" / "checkpoints" / ".membership" / "p-grow.json"
    # The pod waits for its file and prints it: the agent wrote it whole while the pod ran.
    executor.start(pod("p-grow", 'until [ -s "$OPENDLC_MEMBERSHIP_FILE" ]; do sleep 0.05; done; '
                                 'cat "$OPENDLC_MEMBERSHIP_FILE"', env={"OPENDLC_MEMBERSHIP_FILE": str(membership)}))
    wait_for(lambda: "p-grow" in executor.pods)
    executor.resize({"pod_id": "p-grow", "generation": 3, "rank": 1, "world_size": 4, "master_addr": "10.0.0.1",
                     "master_port": 23456})
    assert ended(recorder, "p-grow")["status"] == "Succeeded"
    assert json.loads(recorder.log_text("p-grow")) == {"generation": 3, "rank": 1, "world_size": 4,
                                                       "master_addr": "10.0.0.1", "master_port": 23456}
    executor.resize({"pod_id": "p-grow", "generation": 4, "rank": 0, "world_size": 1, "master_addr": "x",
                     "master_port": 1})  # it ended: nothing is written
    assert json.loads(membership.read_text())["generation"] == 3


def test_it_reports_the_exit_code_of_a_failing_command(executor, recorder):
    executor.start(pod("p-fail", "echo about to fail >&2; exit 3"))
    report = ended(recorder, "p-fail")
    assert (report["status"], report["exit_code"], report["reason"]) == ("Failed", 3, "Error")
    assert "about to fail" in recorder.log_text("p-fail")


def test_it_runs_the_pod_in_its_own_process_group(executor, recorder):
    executor.start(pod("p-group", "sleep 30"))
    pgid = executor.pods["p-group"].pgid
    assert os.getpgid(pgid) == pgid != os.getpgid(0)
    executor.stop("p-group", "Stopped", 1)
    ended(recorder, "p-group")


def test_a_stop_sends_sigterm_then_sigkill_after_the_grace_period(executor, recorder):
    # The command ignores SIGTERM, so only SIGKILL ends it, and not before the grace period.
    executor.start(pod("p-stubborn", "trap '' TERM; echo ready; while true; do sleep 0.1; done"))
    wait_for(lambda: "ready" in recorder.log_text("p-stubborn"))
    pgid = executor.pods["p-stubborn"].pgid
    began = time.monotonic()
    executor.stop("p-stubborn", "Stopped", 1.0)
    report = ended(recorder, "p-stubborn")
    assert time.monotonic() - began >= 1.0
    assert (report["status"], report["reason"]) == ("Failed", "Stopped")
    assert not procs.group_alive(pgid)


def test_a_preempted_pod_finishes_its_sigterm_trap_within_the_grace_period(executor, recorder, tmp_path):
    marker = tmp_path / "flushed"
    command = f"trap 'sleep 0.3; echo saved > {marker}; exit 0' TERM; echo ready; while true; do sleep 0.1; done"
    executor.start(pod("p-trap", command))
    wait_for(lambda: "ready" in recorder.log_text("p-trap"))
    executor.stop("p-trap", "Preempted", 5)
    report = ended(recorder, "p-trap")
    assert marker.read_text() == "saved\n"
    assert (report["status"], report["reason"]) == ("Failed", "Preempted")


def test_the_pod_is_reported_only_after_its_whole_process_group_is_gone(executor, recorder):
    # A background child that ignores SIGTERM keeps the group alive after bash has exited.
    executor.start(pod("p-child", "(trap '' TERM; while true; do sleep 0.1; done) & echo ready; wait"))
    wait_for(lambda: "ready" in recorder.log_text("p-child"))
    pgid = executor.pods["p-child"].pgid
    executor.stop("p-child", "Preempted", 0.5)
    ended(recorder, "p-child")
    assert not procs.group_alive(pgid)


def test_it_enforces_the_maximum_running_time(executor, recorder):
    executor.start(pod("p-long", "sleep 30", max_running_time_s=0.3, grace_s=0.5))
    report = ended(recorder, "p-long")
    assert (report["status"], report["reason"]) == ("Failed", "MaxRunningTime")


def test_a_second_start_of_the_same_pod_is_ignored(executor, recorder):
    executor.start(pod("p-once", "echo once"))
    ended(recorder, "p-once")
    executor.start(pod("p-once", "echo twice"))
    time.sleep(0.2)
    assert [r["status"] for r in recorder.reports("p-once")] == ["Running", "Succeeded"]


def test_stopping_a_pod_it_never_started_reports_it_failed_and_a_late_start_is_ignored(executor, recorder):
    executor.stop("p-ghost", "Preempted", 1)
    executor.start(pod("p-ghost", "echo should not run"))
    report = ended(recorder, "p-ghost")
    assert (report["status"], report["reason"]) == ("Failed", "Preempted")
    assert "p-ghost" not in executor.running_pod_ids()


def test_a_pass_begun_before_a_pod_ended_does_not_ship_its_log_again(tmp_path, recorder):
    """The shipping thread's pass works on the pods it listed before it began; a pod that ended
    and was shipped for the last time meanwhile is not shipped again from offset 0."""
    from types import SimpleNamespace

    from agent.logship import LogShipper

    outbox = Outbox(recorder, flush_s=0.02)
    log_path = tmp_path / "log"
    log_path.write_text("line-1\nline-2\n")
    ended_pod = SimpleNamespace(pod_id="p-done", log_path=log_path, workdir=tmp_path, env={})
    shipper = LogShipper(outbox, lambda: [ended_pod])  # the pass's list, taken before the pod ended
    shipper.ship(ended_pod, final=True)  # the pod ended
    shipper.ship(ended_pod)  # the pass reaches it
    shipper.ship_all()  # and a next pass that still lists it
    outbox.close()
    assert [(c["offset"], c["text"]) for c in recorder.items("jobs.pod_logs")] == [(0, "line-1\nline-2\n")]
    shipper._pods = list  # a later pass no longer lists it: it is forgotten
    shipper.ship_all()
    assert "p-done" not in shipper._finished


def test_it_ships_long_logs_in_chunks_with_byte_offsets(executor, recorder):
    executor.start(pod("p-chatty", "for i in $(seq 1 20000); do echo line-$i-ééé; done"))
    ended(recorder, "p-chatty")
    chunks = sorted((c for c in recorder.items("jobs.pod_logs") if c["pod_id"] == "p-chatty"), key=lambda c: c["offset"])
    assert len(chunks) > 1
    position = 0
    for c in chunks:
        assert c["offset"] == position
        position += len(c["text"].encode())
    lines = recorder.log_text("p-chatty").splitlines()
    assert lines[0] == "line-1-ééé" and lines[-1] == "line-20000-ééé" and len(lines) == 20000


def test_it_reports_easyckpt_progress_when_the_file_changes(executor, recorder):
    command = (
        'mkdir -p "$OPENDLC_CKPT_DIR"; '
        'echo \'{"step": 40, "time": 1767000000.0, "path": "x", "last_progress": {"step": 42, "time": 1767000004.0}}\''
        ' > "$OPENDLC_CKPT_DIR/progress.json"; sleep 0.5'
    )
    executor.start(pod("p-progress", command, env={"OPENDLC_CKPT_DIR": "ckpt"}))
    ended(recorder, "p-progress")
    progress = [p for p in recorder.items("jobs.pod_progress") if p["pod_id"] == "p-progress"]
    assert len(progress) == 1
    assert progress[0]["step"] == 40
    assert progress[0]["checkpoint_at"].startswith("2025-12-29T09:20:00")
    assert progress[0]["progress_at"].startswith("2025-12-29T09:20:04")


def test_a_line_longer_than_a_chunk_is_cut_between_characters():
    from agent.logship import CHUNK_BYTES, _whole_lines

    data = ("a" + "é" * CHUNK_BYTES).encode()[:CHUNK_BYTES]  # ends inside an "é"
    assert _whole_lines(data, at_end=False).decode() == "a" + "é" * ((CHUNK_BYTES - 2) // 2)


def test_a_pod_run_without_its_image_says_so_in_its_running_report(executor, recorder):
    executor.start(pod("p-image", "true", image="pytorch/pytorch:2.3"))
    ended(recorder, "p-image")
    assert recorder.reports("p-image")[0]["message"] == "image not used: process runtime"


@pytest.fixture
def reachable_root():
    """A pod root an unprivileged user can reach (pytest's own temporary directories are private)."""
    root = Path(tempfile.mkdtemp(prefix="opendlc-pods-"))
    root.chmod(0o711)
    yield root / "pods"
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run pods as another user")
def test_a_pod_runs_as_the_unprivileged_pod_user_and_cannot_read_the_agents_secrets(recorder, reachable_root,
                                                                                    monkeypatch):
    from agent.process import PodUser, ProcessExecutor

    monkeypatch.setenv("SECRET_KEY", "agent-only-secret")  # in this process's environment, as an agent's would be
    nobody = PodUser.named("nobody")
    outbox = Outbox(recorder, flush_s=0.02)
    ex = ProcessExecutor("unit-node", reachable_root, outbox, ship_interval_s=0.1, pod_user=nobody)
    ex.run()
    try:
        ex.start(pod("p-nobody", f'id -u; echo "home=$HOME"; echo "env=${{SECRET_KEY:-none}}"; '
                                 f'cat /proc/{os.getpid()}/environ >/dev/null 2>&1 && echo READ-AGENT-ENV; '
                                 f'cat {ex.state_path} >/dev/null 2>&1 && echo READ-AGENT-STATE; '
                                 'echo step > "$OPENDLC_CKPT_DIR/last" && echo wrote-checkpoint'))
        assert ended(recorder, "p-nobody")["status"] == "Succeeded"
    finally:
        ex.close()
        outbox.close()
    text = recorder.log_text("p-nobody")
    assert text.splitlines()[0] == str(nobody.uid)
    assert f"home={reachable_root / 'job-1' / 'p-nobody'}" in text and "env=none" in text
    assert "READ-AGENT-ENV" not in text and "READ-AGENT-STATE" not in text
    assert "wrote-checkpoint" in text


def test_the_pod_user_must_exist_be_unprivileged_and_reach_the_pod_root(reachable_root):
    from agent.process import PodUser

    with pytest.raises(ValueError, match="no user 'no-such-user-here'"):
        PodUser.named("no-such-user-here")
    with pytest.raises(ValueError, match="must not run as root"):
        PodUser.named("root")
    stranger = PodUser("stranger", 54321, 54321, "/")
    assert stranger.can_reach(reachable_root) is None  # /tmp, then a directory it may enter (0711)
    reachable_root.parent.chmod(0o700)
    assert stranger.can_reach(reachable_root) == str(reachable_root.parent)
