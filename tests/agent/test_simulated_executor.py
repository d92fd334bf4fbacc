"""The simulated executor holds allocations for their declared time and ends pods as told."""

import time

import pytest

from agent.outbox import Outbox
from agent.simulated import SimulatedExecutor
from tests.agent.helpers import Recorder, wait_for


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def executor(recorder):
    outbox = Outbox(recorder, flush_s=0.02)
    ex = SimulatedExecutor(outbox)
    ex.run()
    yield ex
    ex.close()
    outbox.close()


def sim_pod(pod_id, **env):
    return {"pod_id": pod_id, "job_id": "j", "command": "train", "executor": "simulated", "grace_s": 30,
            "max_running_time_s": None, "env": {k: str(v) for k, v in env.items()}}


def test_a_simulated_pod_runs_for_its_duration_then_succeeds(executor, recorder):
    began = time.monotonic()
    executor.start(sim_pod("s-ok", SIM_DURATION_S=0.3))
    assert wait_for(lambda: recorder.reports("s-ok"))[0]["status"] == "Running"
    assert executor.running_pod_ids() == ["s-ok"]
    report = wait_for(lambda: recorder.final_report("s-ok"))
    assert time.monotonic() - began >= 0.3
    assert (report["status"], report["exit_code"]) == ("Succeeded", 0)
    assert executor.running_pod_ids() == []


def test_a_simulated_pod_fails_with_the_exit_code_it_was_given(executor, recorder):
    executor.start(sim_pod("s-fail", SIM_DURATION_S=0.05, SIM_EXIT_CODE=7))
    report = wait_for(lambda: recorder.final_report("s-fail"))
    assert (report["status"], report["exit_code"], report["reason"]) == ("Failed", 7, "Error")


def test_a_stopped_simulated_pod_fails_with_the_stop_reason_after_its_stop_time(executor, recorder):
    executor.start(sim_pod("s-stop", SIM_DURATION_S=30, SIM_STOP_S=0.2))
    began = time.monotonic()
    executor.stop("s-stop", "SpotReleased", 30)
    report = wait_for(lambda: recorder.final_report("s-stop"))
    assert time.monotonic() - began >= 0.2
    assert (report["status"], report["reason"]) == ("Failed", "SpotReleased")
    time.sleep(0.1)
    assert len([r for r in recorder.reports("s-stop") if r["status"] == "Failed"]) == 1


def test_a_simulated_pod_ends_at_its_maximum_running_time(executor, recorder):
    executor.start({**sim_pod("s-max", SIM_DURATION_S=30), "max_running_time_s": 0.1})
    report = wait_for(lambda: recorder.final_report("s-max"))
    assert (report["status"], report["reason"]) == ("Failed", "MaxRunningTime")


def test_thousands_of_simulated_pods_end_in_a_few_batched_messages(executor, recorder):
    for i in range(3000):
        executor.start(sim_pod(f"s-{i}", SIM_DURATION_S=0.2 + (i % 10) / 100))
    wait_for(lambda: len([r for r in recorder.reports() if r["status"] == "Succeeded"]) == 3000)
    batches = [batch for name, batch in recorder.sent if name == "jobs.pod_reports"]
    assert max(len(b) for b in batches) <= 200
    assert len(batches) < 200  # 6000 reports
    assert executor.running_pod_ids() == []


def test_a_stopped_pods_end_is_reported_at_once_not_at_the_next_flush(recorder):
    outbox = Outbox(recorder, flush_s=30)  # no timed flush within the test
    ex = SimulatedExecutor(outbox)
    ex.run()
    try:
        ex.start(sim_pod("s-urgent", SIM_DURATION_S=30))
        ex.stop("s-urgent", "Preempted", 30)
        report = wait_for(lambda: recorder.final_report("s-urgent"), timeout=5)
        assert (report["status"], report["reason"]) == ("Failed", "Preempted")
    finally:
        ex.close()
        outbox.close()


def test_a_simulated_pod_ships_a_few_log_lines_through_the_pod_log_path(executor, recorder):
    executor.start({**sim_pod("s-log", SIM_DURATION_S=0.05), "image": "pytorch:2"})
    wait_for(lambda: recorder.final_report("s-log"))
    text = wait_for(lambda: "exited" in recorder.log_text("s-log") and recorder.log_text("s-log"))
    assert text.splitlines() == ["simulated pod s-log: no container runs (image pytorch:2)", "$ train",
                                 "running for 0.05 s", "exited with code 0"]


def test_a_stopped_simulated_pod_says_why_in_its_log(executor, recorder):
    executor.start(sim_pod("s-log-stop", SIM_DURATION_S=30))
    executor.stop("s-log-stop", "Preempted", 30)
    wait_for(lambda: "stopped (Preempted)" in recorder.log_text("s-log-stop"))
