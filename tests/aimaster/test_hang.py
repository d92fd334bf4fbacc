"""Hang detection, driven by an injected `now`: no sleeps."""

from datetime import timedelta

from django.utils import timezone

from jobs.hang import detect_hangs
from jobs.lifecycle import apply_progress
from jobs.logs import store_chunks
from jobs.models import Job, Pod, PodLog

# Autouse: agent messages and cycle requests are recorded, not sent.
from tests.jobs.conftest import cycle_requests, report, sent  # noqa: F401

T0 = timezone.now()


def started(running, reports, **kw):
    kw.setdefault("ft_hang_detection", True)
    kw.setdefault("ft_hang_interval_s", 600)
    job = running(pods=kw.pop("pods", 1), **kw)
    # It started at T0 (and has been silent since).
    Pod.objects.filter(job=job).update(started_at=T0)
    Job.objects.filter(pk=job.pk).update(running_at=T0)
    return job


def log_at(pod, at, text="step=1\n"):
    store_chunks([{"pod_id": pod.pod_id, "offset": PodLog.objects.filter(pod=pod).count() * 100, "text": text}])
    PodLog.objects.filter(pod=pod).update(received_at=at)


def test_a_pod_that_printed_nothing_for_the_interval_is_restarted(running, reports, sent,
                                                                  django_capture_on_commit_callbacks):
    job = started(running, reports, pods=2)
    assert detect_hangs(T0 + timedelta(seconds=599)) == []

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert detect_hangs(T0 + timedelta(seconds=600)) == [job.job_id]
    job.refresh_from_db()
    assert (job.status, job.restart_count) == ("Restarting", 1)
    record = job.restarts.get()
    assert (record.cause, record.counted) == ("Hang", True)
    assert "no log output and no progress report for 600 s (hang interval 600 s)" in record.message
    assert sorted(m.payload["reason"] for m in sent) == ["Restart", "Restart"]  # the whole job, both pods


def test_log_output_keeps_a_job_alive(running, reports):
    job = started(running, reports)
    log_at(job.pods.get(), T0 + timedelta(seconds=500))
    assert detect_hangs(T0 + timedelta(seconds=1000)) == []
    assert detect_hangs(T0 + timedelta(seconds=1100)) == [job.job_id]


def test_a_progress_report_keeps_a_quiet_job_alive(running, reports):
    job = started(running, reports)
    apply_progress([{"pod_id": job.pods.get().pod_id, "progress_at": (T0 + timedelta(seconds=550)).isoformat()}])
    assert detect_hangs(T0 + timedelta(seconds=1000)) == []
    assert detect_hangs(T0 + timedelta(seconds=1150)) == [job.job_id]


def test_jobs_without_hang_detection_are_left_alone(running, reports):
    started(running, reports, ft_hang_detection=False)
    started(running, reports, ft_enabled=False)
    assert detect_hangs(T0 + timedelta(days=1)) == []


def test_other_configuration_can_turn_hang_detection_on_with_its_interval(running, reports):
    job = started(running, reports, ft_hang_detection=False,
                  ft_other_config="--enable-job-hang-detection=true --job-hang-interval=120")
    assert detect_hangs(T0 + timedelta(seconds=119)) == []
    assert detect_hangs(T0 + timedelta(seconds=120)) == [job.job_id]


def test_a_hang_past_the_restart_limit_fails_the_job(running, reports):
    job = started(running, reports, ft_max_restarts=0)
    detect_hangs(T0 + timedelta(seconds=600))
    job.refresh_from_db()
    assert (job.status, job.reason_code) == ("Failed", "MaxRestartsExceeded")
    assert job.reason_message.startswith("Hang detected")


def test_a_restarted_job_is_timed_from_its_new_pods(running, reports, cycle):
    job = started(running, reports)
    detect_hangs(T0 + timedelta(seconds=600))
    reports(report(job.pods.get(current=True), "Failed", 143))
    cycle()
    back = T0 + timedelta(seconds=700)
    reports(report(job.pods.get(current=True), "Running", at=back))
    job.refresh_from_db()
    assert job.status == "Running"
    assert detect_hangs(back + timedelta(seconds=599)) == []
    assert detect_hangs(back + timedelta(seconds=600)) == [job.job_id]
