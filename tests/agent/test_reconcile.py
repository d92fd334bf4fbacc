"""A restarted agent adopts its pods still running, reports those that ended, and kills orphans."""

import os
import signal
import subprocess

import pytest

from agent import procs
from agent.outbox import Outbox
from agent.process import MARKER, ProcessExecutor, marker
from tests.agent.helpers import Recorder, wait_for
from tests.agent.test_process_executor import pod

NODE = "reconcile-node"


@pytest.fixture
def make_executor(tmp_path):
    made = []

    def make():
        recorder = Recorder()
        outbox = Outbox(recorder, flush_s=0.02)
        ex = ProcessExecutor(NODE, tmp_path / "pods", outbox, ship_interval_s=0.1)
        made.append((ex, outbox))
        return ex, recorder

    yield make
    for ex, outbox in made:
        ex.close()
        outbox.close()
    for pgid in procs.groups_with_env(MARKER, marker(NODE, tmp_path / "pods")):
        procs.signal_group(pgid, signal.SIGKILL)


def test_a_restarted_agent_adopts_a_pod_that_still_runs_and_can_stop_it(make_executor):
    first, _ = make_executor()
    first.run()
    first.start(pod("p-adopt", "echo ready; while true; do sleep 0.1; done"))
    first.close()  # the agent goes away; the pod does not

    second, recorder = make_executor()
    second.run()
    assert second.running_pod_ids() == ["p-adopt"]
    second.stop("p-adopt", "Preempted", 1)
    report = wait_for(lambda: recorder.final_report("p-adopt"))
    assert (report["status"], report["reason"]) == ("Failed", "Preempted")
    assert "ready" in recorder.log_text("p-adopt")


def test_a_restarted_agent_reports_the_exit_code_of_a_pod_that_ended_while_it_was_away(make_executor):
    # An agent that died right after starting the pod: its state lists the pod, nobody watches it.
    dead, _ = make_executor()
    process = dead._spawn(pod("p-gone", "sleep 0.3; exit 4"), [])
    dead.pods["p-gone"] = process
    dead._save_state()
    process.proc.wait()

    second, recorder = make_executor()
    second.run()
    report = wait_for(lambda: recorder.final_report("p-gone"))
    assert (report["status"], report["exit_code"]) == ("Failed", 4)
    assert second.running_pod_ids() == []


def test_a_restarted_agent_kills_pod_processes_it_does_not_own(make_executor, tmp_path):
    orphan = subprocess.Popen(["sleep", "60"], env={**os.environ, MARKER: marker(NODE, tmp_path / "pods")},
                              start_new_session=True)
    try:
        agent, _ = make_executor()
        agent.run()
        assert orphan.wait(timeout=5) == -signal.SIGKILL
    finally:
        orphan.kill()


def test_two_agents_saving_the_same_state_file_at_once_never_fail(make_executor):
    # An agent restarted while the old one still finishes a pod: both rewrite the state file.
    # With one shared temporary name, one writer's rename took the other's file away
    # (FileNotFoundError in the pod's watcher thread, and its final report was lost).
    import threading

    (old, _), (new, _) = make_executor(), make_executor()
    errors = []

    def save(ex):
        try:
            for _ in range(200):
                with ex._lock:
                    ex._save_state()
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(ex,)) for ex in (old, new) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert old._load_state() == {}
