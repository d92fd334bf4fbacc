from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.lifecycle import apply_progress, enforce_max_running_time
from jobs.services import ValidationFailed, create_job, stop_job
from tests.jobs.conftest import make_request, report


@pytest.fixture
def admitted(bob, cycle):
    """A two-pod job of bob's, bound and waiting for its pods to start."""
    job = create_job(bob, make_request(pods=2))
    cycle()
    job.refresh_from_db()
    return job


def status(job):
    job.refresh_from_db()
    return job.status


def test_the_job_runs_once_every_pod_of_the_gang_runs(admitted, reports):
    first, second = admitted.pods.all()
    reports(report(first, "Running"))
    assert status(admitted) == "EnvPreparing"
    reports(report(second, "Running"))
    assert status(admitted) == "Running" and admitted.running_at is not None


def test_the_started_event_says_how_the_agent_runs_the_pod(admitted, reports):
    from jobs.models import PodEvent

    first, second = admitted.pods.all()
    # Two reports at once take the batched path; one alone the single-report path: both keep the note.
    reports(report(first, "Running", message="image not used: process runtime"),
            report(second, "Running", message="podman container of pytorch:2.5"))
    started = dict(PodEvent.objects.filter(reason="Started").values_list("pod__pod_id", "message"))
    assert started[first.pod_id].endswith("; image not used: process runtime")
    assert started[second.pod_id].endswith("; podman container of pytorch:2.5")


def test_the_job_succeeds_when_all_pods_succeed(admitted, reports):
    first, second = admitted.pods.all()
    reports(report(first, "Running"), report(second, "Running"), report(first, "Succeeded", 0))
    assert status(admitted) == "Running"
    reports(report(second, "Succeeded", 0))
    assert status(admitted) == "Succeeded"
    assert list(admitted.status_history.values_list("status", flat=True)) == [
        "Queuing", "EnvPreparing", "Running", "Succeeded"]


def test_duplicate_and_late_reports_change_nothing(admitted, reports):
    first, second = admitted.pods.all()
    assert reports(report(first, "Running"), report(first, "Running")) == 1
    assert reports(report(first, "Succeeded", 0), report(first, "Succeeded", 0), report(first, "Failed", 1)) == 1
    assert reports(report(first, "Running")) == 0  # a late Running after the end
    first.refresh_from_db()
    assert first.status == "Succeeded" and first.exit_code == 0
    assert admitted.events.filter(reason="JobRunning").count() == 0  # the gang never ran together


def test_a_failed_pod_fails_the_job_and_stops_the_others(admitted, reports, sent):
    first, second = admitted.pods.all()
    reports(report(first, "Running"), report(second, "Running"))
    sent.clear()
    reports(report(first, "Failed", 2, message="CUDA out of memory"))
    admitted.refresh_from_db()
    assert admitted.status == "Failed" and "exit code 2: CUDA out of memory" in admitted.reason_message
    second.refresh_from_db()
    assert second.terminating and second.reason_code == "Stopped"
    assert [(m.task, m.payload) for m in sent] == [
        ("agent.stop_pods", {"pod_id": second.pod_id, "reason": "Stopped", "grace_s": 30})]
    reports(report(second, "Failed", 143))
    second.refresh_from_db()
    assert second.status == "Failed" and second.sub_status == "Normal" and status(admitted) == "Failed"


def test_a_pod_whose_container_never_started_is_told_without_an_exit_code(admitted, reports):
    from jobs.models import PodEvent

    first, _ = admitted.pods.all()
    reports(report(first, "Failed", None, reason="StartError", message="podman could not start the container"))
    admitted.refresh_from_db()
    assert admitted.reason_message == f"Pod {first.pod_id} failed: podman could not start the container"
    event = PodEvent.objects.get(pod=first, reason="StartError")
    assert event.message == "Pod Failed: podman could not start the container"


def test_a_report_for_an_unknown_pod_or_with_a_bad_status_is_ignored(admitted, reports):
    pod = admitted.pods.first()
    assert reports({"pod_id": "nope", "status": "Running"}, {"pod_id": pod.pod_id, "status": "Exploded"}) == 0
    assert status(admitted) == "EnvPreparing"


def test_stopping_a_queued_job_stops_it_at_once(bob, sent):
    job = create_job(bob, make_request())
    stop_job(bob, job)
    assert status(job) == "Stopped" and job.reason_code == "StoppedByUser" and sent == []


def test_stopping_a_running_job_waits_for_its_pods_to_be_gone(admitted, bob, reports, sent, django_capture_on_commit_callbacks):
    first, second = admitted.pods.all()
    reports(report(first, "Running"), report(second, "Running"))
    with django_capture_on_commit_callbacks(execute=True):
        stop_job(bob, admitted)
    assert status(admitted) == "Stopping"
    assert sorted(m.payload["pod_id"] for m in sent if m.payload.get("reason") == "Stopped") == [first.pod_id, second.pod_id]
    stop_job(bob, admitted)  # stopping twice is harmless
    reports(report(first, "Failed", 143, reason="Stopped"))
    assert status(admitted) == "Stopping"
    reports(report(second, "Failed", 143, reason="Stopped"))
    assert status(admitted) == "Stopped"
    first.refresh_from_db()
    assert first.reason_code == "Stopped" and first.sub_status == "Normal"


def test_a_finished_job_cannot_be_stopped(admitted, bob, reports):
    first, second = admitted.pods.all()
    reports(*(report(p, s, 0) for s in ("Running", "Succeeded") for p in (first, second)))
    with pytest.raises(ValidationFailed, match="already ended"):
        stop_job(bob, admitted)


def test_charlie_cannot_stop_bobs_job(admitted, charlie):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        stop_job(charlie, admitted)


def test_a_job_past_its_max_running_time_is_stopped_and_fails(bob, cycle, reports, sent, django_capture_on_commit_callbacks):
    job = create_job(bob, make_request(max_running_time_minutes=10))
    cycle()
    pod = job.pods.get()
    start = timezone.now()
    reports(report(pod, "Running", at=start))
    assert enforce_max_running_time(now=start + timedelta(minutes=9)) == 0
    with django_capture_on_commit_callbacks(execute=True):
        assert enforce_max_running_time(now=start + timedelta(minutes=11)) == 1
    assert status(job) == "Stopping"
    assert sent[-1].payload == {"pod_id": pod.pod_id, "reason": "MaxRunningTime", "grace_s": 30}
    reports(report(pod, "Failed", 143))
    assert status(job) == "Failed" and job.reason_code == "MaxRunningTime"


def test_progress_keeps_the_newest_checkpoint(admitted):
    pod = admitted.pods.first()
    now = timezone.now()
    apply_progress([{"pod_id": pod.pod_id, "step": 200, "checkpoint_at": now.isoformat(), "progress_at": now.isoformat()}])
    apply_progress([{"pod_id": pod.pod_id, "step": 100, "checkpoint_at": (now - timedelta(minutes=5)).isoformat(),
                     "progress_at": None}])
    admitted.refresh_from_db()
    assert admitted.last_checkpoint_step == 200 and admitted.last_checkpoint_at == now
    assert admitted.last_progress_at == now
