"""Restarts against the database: pod reports in, restart records, incarnations and messages out."""

from datetime import timedelta

from django.utils import timezone

from cycle import tasks as cycle_tasks
from jobs import dispatch
from jobs.logs import store_chunks
from jobs.models import Job, Pod, RestartRecord

# Autouse: agent messages and cycle requests are recorded, not sent.
from tests.jobs.conftest import cycle_requests, report, sent  # noqa: F401


def refreshed(job) -> Job:
    job.refresh_from_db()
    return job


def current_pods(job):
    return list(Pod.objects.filter(job=job, current=True).order_by("role", "index"))


def fail_pod(reports, pod, code=137, message="", at=None):
    reports(report(pod, "Failed", code, at=at, reason="Error", message=message))


def run_all(reports, job, at=None):
    reports(*(report(p, "Running", at=at) for p in current_pods(job)))


def restart_once(job, reports, cycle, code=137):
    """One failure and its restart, all the way back to Running."""
    fail_pod(reports, current_pods(job)[0], code)
    for pod in Pod.objects.filter(job=job, terminating=True, status="Running"):
        reports(report(pod, "Failed", 143))
    cycle()
    run_all(reports, job)


def preempt(reports, pod, reason=dispatch.PREEMPTED):
    """What a schedule cycle's preemption does, then the agent's report that the pod is gone."""
    dispatch.stop_pods([pod], reason, "reclaimed by quota nlp-team for job dlc-lender", 30, event="Resource Preempted")
    reports(report(pod, "Failed", 143, reason=reason))


# ---- Synchronous ----------------------------------------------------------------------------------


def test_a_retryable_failure_stops_the_other_pods_for_a_restart(running, reports, sent):
    job = running(pods=2)
    first, second = current_pods(job)
    sent.clear()
    fail_pod(reports, first, 137)

    job = refreshed(job)
    assert (job.status, job.restart_count, job.preemption_restart_count) == ("Restarting", 1, 0)
    assert [(m.task, m.payload["pod_id"], m.payload["reason"]) for m in sent] == [
        ("agent.stop_pods", second.pod_id, "Restart")]
    record = job.restarts.get()
    assert (record.cause, record.counted) == ("Failure", True)
    assert "exit code 137 is retryable" in record.message
    assert job.events.filter(reason="RestartFailure", message__contains="restart 1 of 3").exists()


def test_synchronous_restarts_make_new_incarnations_for_all_pods_and_keep_the_old_ones(running, reports, cycle, sent):
    job = running(pods=2)
    old = current_pods(job)
    fail_pod(reports, old[0], 137)
    reports(report(old[1], "Failed", 143))  # stopped for the restart

    job = refreshed(job)
    assert job.status == "Queuing"
    new = current_pods(job)
    assert [(p.index, p.incarnation, p.node, p.status) for p in new] == [
        (0, 1, None, "Pending"), (1, 1, None, "Pending")]
    assert [p.pod_id for p in new] == [f"{job.job_id}-worker-0-1", f"{job.job_id}-worker-1-1"]
    kept = Pod.objects.filter(job=job, current=False).order_by("index")
    assert [(p.pod_id, p.incarnation, p.status) for p in kept] == [(o.pod_id, 0, "Failed") for o in old]

    sent.clear()
    cycle()
    assert refreshed(job).status == "EnvPreparing"
    assert sorted(m.payload["pod_id"] for m in sent if m.task == "agent.start_pods") == [p.pod_id for p in new]


def test_a_late_report_of_an_old_incarnation_changes_nothing(running, reports, cycle):
    job = running(pods=1)
    old = current_pods(job)[0]
    restart_once(job, reports, cycle)
    assert reports(report(old, "Failed", 1)) == 0
    assert refreshed(job).status == "Running"


def test_running_again_is_recorded_on_the_restart_record(running, reports, cycle):
    job = running(pods=2)
    failed_at = timezone.now()
    back_at = failed_at + timedelta(seconds=42)
    fail_pod(reports, current_pods(job)[0], 137, at=failed_at)
    reports(report(Pod.objects.get(job=job, current=True, terminating=True), "Failed", 143, at=failed_at))
    cycle()
    reports(report(current_pods(job)[0], "Running", at=back_at))
    assert RestartRecord.objects.get(job=job).running_again_at is None  # one pod of two runs
    reports(report(current_pods(job)[1], "Running", at=back_at))

    record = RestartRecord.objects.get(job=job)
    assert refreshed(job).status == "Running"
    assert record.running_again_at == back_at and record.duration_s == 42
    assert job.events.get(reason="RunningAgain").message == "Running again 42 s after the Failure restart"


def test_after_the_maximum_number_of_restarts_the_next_failure_fails_the_job(running, reports, cycle):
    job = running(pods=1, ft_max_restarts=2)
    restart_once(job, reports, cycle)
    restart_once(job, reports, cycle)
    assert refreshed(job).restart_count == 2

    fail_pod(reports, current_pods(job)[0], 137)
    job = refreshed(job)
    assert (job.status, job.reason_code) == ("Failed", "MaxRestartsExceeded")
    assert "the job was restarted 2 times, the maximum (Maximum Job Restarts = 2)" in job.reason_message
    assert job.restarts.count() == 2


def test_other_configuration_overrides_maximum_job_restarts(running, reports):
    job = running(pods=1, ft_max_restarts=3, ft_other_config="--max-num-of-job-restart=0")
    fail_pod(reports, current_pods(job)[0], 137)
    assert refreshed(job).reason_code == "MaxRestartsExceeded"


def test_a_fatal_failure_fails_the_job_saying_why_it_was_not_restarted(running, reports, sent):
    job = running(pods=2)
    first, second = current_pods(job)
    store_chunks([{"pod_id": first.pod_id, "offset": 0,
                   "text": "step=1\n  File \"train.py\", line 3\nSyntaxError: invalid syntax\n"}])
    sent.clear()
    fail_pod(reports, first, 1, message="the command exited with code 1")

    job = refreshed(job)
    assert (job.status, job.restart_count) == ("Failed", 0)
    assert "not restarted: the log shows a fatal error ('SyntaxError')" in job.reason_message
    assert [(m.payload["pod_id"], m.payload["reason"]) for m in sent] == [(second.pod_id, "Stopped")]
    assert not job.restarts.exists()


def test_a_transient_error_in_the_log_tail_restarts_the_job(running, reports):
    job = running(pods=1)
    pod = current_pods(job)[0]
    store_chunks([{"pod_id": pod.pod_id, "offset": 0, "text": "step=9\n" * 500},
                  {"pod_id": pod.pod_id, "offset": 3500,
                   "text": "RuntimeError: NCCL communicator was aborted on rank 0.\n"}])
    fail_pod(reports, pod, 1)
    assert refreshed(job).status == "Queuing"
    assert "NCCL communicator was aborted" in job.restarts.get().message


def test_on_failure_restarts_even_an_exit_code_2(running, reports):
    job = running(pods=1, ft_policy="OnFailure")
    fail_pod(reports, current_pods(job)[0], 2)
    assert refreshed(job).status == "Queuing" and job.restart_count == 1


def test_without_fault_tolerance_a_retryable_failure_still_fails_the_job(running, reports):
    job = running(pods=1, ft_enabled=False)
    fail_pod(reports, current_pods(job)[0], 137)
    job = refreshed(job)
    assert (job.status, job.restart_count) == ("Failed", 0) and not job.restarts.exists()


def test_a_lost_node_counts_as_a_restart_with_its_own_cause(running, reports):
    job = running(pods=1)
    reports(report(current_pods(job)[0], "Failed", None, reason="NodeLost", message="no heartbeats"))
    job = refreshed(job)
    assert (job.status, job.restart_count) == ("Queuing", 1)
    assert job.restarts.get().cause == "NodeLost"


def test_stopping_a_restarting_job_stops_it_instead_of_requeueing(running, reports, bob):
    from jobs.services import stop_job

    job = running(pods=2)
    first, second = current_pods(job)
    fail_pod(reports, first, 137)
    stop_job(bob, refreshed(job))
    reports(report(second, "Failed", 143))
    assert refreshed(job).status == "Stopped"
    assert Pod.objects.filter(job=job, current=True, incarnation=0).count() == 2


# ---- Asynchronous ---------------------------------------------------------------------------------


def test_asynchronous_restarts_only_the_failed_pod_on_its_node(running, reports, sent):
    job = running(pods=2, ft_run_type="Asynchronous")
    first, second = current_pods(job)
    sent.clear()
    fail_pod(reports, first, 137)

    job = refreshed(job)
    assert job.status == "EnvPreparing"
    new = Pod.objects.get(job=job, current=True, index=0)
    assert (new.incarnation, new.node_id, new.gpu_indices, new.kind) == (
        1, first.node_id, first.gpu_indices, first.kind)
    assert [(m.task, m.payload["pod_id"], m.payload["env"]["RANK"]) for m in sent] == [
        ("agent.start_pods", new.pod_id, "0")]  # the other pod is neither stopped nor started again
    second.refresh_from_db()
    assert second.current and second.status == "Running" and not second.terminating

    reports(report(new, "Running"))
    assert refreshed(job).status == "Running" and job.restarts.get().running_again_at is not None


def test_asynchronous_falls_back_to_requeueing_the_job_when_the_node_is_gone(running, reports, sent):
    job = running(pods=2, ft_run_type="Asynchronous")
    first, second = current_pods(job)
    first.node.status = "NotReady"
    first.node.save()
    sent.clear()
    fail_pod(reports, first, 137)
    assert refreshed(job).status == "Restarting"
    assert [(m.payload["pod_id"], m.payload["reason"]) for m in sent] == [(second.pod_id, "Restart")]


def test_asynchronous_does_not_restart_a_pod_in_place_on_a_cordoned_node(running, reports, sent):
    job = running(pods=2, ft_run_type="Asynchronous")
    first, second = current_pods(job)
    first.node.cordoned = True
    first.node.save()
    sent.clear()
    fail_pod(reports, first, 137)
    assert refreshed(job).status == "Restarting"
    assert [(m.payload["pod_id"], m.payload["reason"]) for m in sent] == [(second.pod_id, "Restart")]


# ---- preemption ----------------------------------------------------------------------------------


def test_a_preempted_job_is_requeued_without_counting_against_maximum_job_restarts(running, reports):
    job = running(pods=1, ft_max_restarts=0)
    preempt(reports, current_pods(job)[0])

    job = refreshed(job)
    assert (job.status, job.restart_count, job.preemption_restart_count) == ("Queuing", 0, 1)
    record = job.restarts.get()
    assert (record.cause, record.counted) == ("Preemption", False)
    assert "reclaimed by quota nlp-team for job dlc-lender" in record.message


def test_a_requeued_job_queues_by_the_time_of_its_restart_not_its_submission(running, reports):

    job = running(pods=1)
    preempted_at = timezone.now() + timedelta(minutes=5)
    dispatch.stop_pods([current_pods(job)[0]], dispatch.PREEMPTED, "reclaimed", 30)
    reports(report(current_pods(job)[0], "Failed", 143, at=preempted_at))

    pending = {p.job_id: p for p in cycle_tasks.process_cycle.build_snapshot(timezone.now()).jobs}
    assert refreshed(job).submitted_at < preempted_at
    assert pending[job.job_id].submitted_at == preempted_at  # behind the lender's job that reclaimed the node


def test_preemption_restarts_have_their_own_limit(running, reports, cycle):
    job = running(pods=1, ft_max_preemption_restarts=1)
    preempt(reports, current_pods(job)[0])
    cycle()
    run_all(reports, job)
    preempt(reports, current_pods(job)[0])

    job = refreshed(job)
    assert (job.status, job.reason_code) == ("Failed", "MaxPreemptionRestartsExceeded")
    assert job.preemption_restart_count == 1


def test_preemption_restarts_are_unlimited_by_default(running, reports, cycle):
    job = running(pods=1)
    for _ in range(5):
        preempt(reports, current_pods(job)[0])
        cycle()
        run_all(reports, job)
    job = refreshed(job)
    assert (job.status, job.preemption_restart_count, job.restart_count) == ("Running", 5, 0)
    assert Pod.objects.filter(job=job).count() == 6


def test_a_spot_release_sends_the_job_back_to_bidding(running, reports):
    job = running(pods=1)
    Job.objects.filter(pk=job.pk).update(source="spot")  # the queue it returns to is what matters here
    preempt(reports, current_pods(job)[0], reason=dispatch.SPOT_RELEASED)
    job = refreshed(job)
    assert job.status == "Bidding"
    assert (job.restarts.get().cause, job.restarts.get().counted) == ("SpotReleased", False)


def test_without_fault_tolerance_a_preempted_job_fails(running, reports):
    job = running(pods=1, ft_enabled=False)
    preempt(reports, current_pods(job)[0])
    assert (refreshed(job).status, job.reason_code) == ("Failed", "Preempted")


def test_a_gang_peer_failing_before_the_preempted_pod_ends_restarts_the_job_for_the_preemption(running, reports):
    # The peer's collective fails as soon as the preempted worker is gone; its end report may be
    # applied before the preempted pod's own.
    job = running(pods=2, ft_max_restarts=0)
    victim, peer = current_pods(job)
    dispatch.stop_pods([victim], dispatch.PREEMPTED, "reclaimed by quota nlp-team for job dlc-lender", 30,
                       event="Resource Preempted")
    fail_pod(reports, peer, code=1, message="the command exited with code 1")
    job = refreshed(job)
    assert job.status == "Restarting", job.reason_message
    record = job.restarts.get()
    assert (record.cause, record.counted) == ("Preemption", False)
    assert "reclaimed by quota nlp-team" in record.message

    reports(report(victim, "Failed", 143, reason=dispatch.PREEMPTED))
    job = refreshed(job)
    assert (job.status, job.restart_count, job.preemption_restart_count) == ("Queuing", 0, 1)


def test_without_fault_tolerance_a_gang_whose_peer_failed_first_fails_as_preempted(running, reports):
    job = running(pods=2, ft_enabled=False)
    victim, peer = current_pods(job)
    dispatch.stop_pods([victim], dispatch.PREEMPTED, "reclaimed by quota nlp-team for job dlc-lender", 30)
    fail_pod(reports, peer, code=1)
    job = refreshed(job)
    assert (job.status, job.reason_code) == ("Failed", "Preempted")
    assert job.reason_message.startswith("Resource Preempted: reclaimed by quota nlp-team")


def test_a_failure_while_the_job_is_not_being_preempted_is_judged_as_a_failure(running, reports):
    job = running(pods=2, ft_max_restarts=0)
    fail_pod(reports, current_pods(job)[1], code=1)
    assert (refreshed(job).status, job.reason_code) == ("Failed", "Error")
