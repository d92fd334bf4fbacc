"""The outbox batches messages to the platform and keeps them while the broker is down."""

from agent.outbox import Outbox
from tests.agent.helpers import Recorder, wait_for


def test_it_sends_logs_before_the_report_that_the_pod_ended():
    recorder = Recorder()
    outbox = Outbox(recorder, flush_s=10)
    outbox.report("p", "Succeeded", exit_code=0)
    outbox.put("jobs.pod_logs", {"pod_id": "p", "offset": 0, "text": "bye\n"})
    outbox.flush()
    outbox.close()
    assert [name for name, _ in recorder.sent] == ["jobs.pod_logs", "jobs.pod_reports"]


def test_it_keeps_what_it_could_not_send_and_sends_it_later_in_order():
    recorder, failing = Recorder(), {"on": True, "attempts": 0}

    def send(name, items):
        if failing["on"]:
            failing["attempts"] += 1
            raise ConnectionError("broker down")
        recorder(name, items)

    outbox = Outbox(send, flush_s=0.02)
    outbox.report("p", "Running")
    outbox.report("p", "Succeeded", exit_code=0)
    outbox.put("jobs.pod_logs", {"pod_id": "p", "offset": 0, "text": "x"})
    wait_for(lambda: failing["attempts"] >= 1, timeout=5)
    failing["on"] = False
    wait_for(lambda: len(recorder.reports("p")) == 2, timeout=5)
    outbox.close()
    assert [r["status"] for r in recorder.reports("p")] == ["Running", "Succeeded"]
    assert recorder.items("jobs.pod_logs") == [{"pod_id": "p", "offset": 0, "text": "x"}]


def test_an_urgent_report_goes_at_once_with_what_waited_before_it():
    recorder = Recorder()
    outbox = Outbox(recorder, flush_s=30)  # no timed flush within the test
    outbox.report("p", "Running")
    outbox.put("jobs.pod_logs", {"pod_id": "q", "offset": 0, "text": "last line\n"})
    outbox.report("q", "Failed", exit_code=137, reason="Preempted", urgent=True)
    wait_for(lambda: len(recorder.sent) == 2, timeout=5)
    assert [name for name, _ in recorder.sent] == ["jobs.pod_logs", "jobs.pod_reports"]
    assert [(r["pod_id"], r["status"]) for r in recorder.items("jobs.pod_reports")] == [("p", "Running"), ("q", "Failed")]
    outbox.report("p", "Succeeded", exit_code=0)  # not urgent: it waits for the next flush
    outbox.close()
    assert [r["status"] for r in recorder.reports("p")] == ["Running", "Succeeded"]


def test_a_pods_end_goes_within_the_end_window_not_at_the_next_flush():
    """The end frees GPUs that waiting jobs want; a Running report waits for the flush, but rides along."""
    recorder = Recorder()
    outbox = Outbox(recorder, flush_s=30, end_window_s=0.01)  # no timed flush within the test
    outbox.report("p", "Running")
    outbox.report("q", "Succeeded", exit_code=0)
    wait_for(lambda: len(recorder.sent) == 1, timeout=5)
    assert [(r["pod_id"], r["status"]) for r in recorder.items("jobs.pod_reports")] == [
        ("p", "Running"), ("q", "Succeeded")]
    outbox.report("p", "Failed", exit_code=1, reason="Error")
    wait_for(lambda: len(recorder.sent) == 2, timeout=5)
    outbox.close()
    assert [r["status"] for r in recorder.reports("p")] == ["Running", "Failed"]


def test_an_end_report_repeats_when_its_pod_was_reported_started():
    recorder = Recorder()
    outbox = Outbox(recorder, flush_s=30)
    outbox.report("p", "Running", message="podman container of img:1")
    outbox.report("p", "Succeeded", exit_code=0)
    outbox.report("q", "Failed", reason="StartError")  # never started
    outbox.close()
    running, ended = recorder.reports("p")
    assert (ended["started"], ended["started_message"]) == (running["at"], "podman container of img:1")
    assert "started" not in recorder.reports("q")[0] and "started" not in running
