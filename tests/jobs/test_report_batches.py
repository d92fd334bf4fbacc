"""A batch of pod reports (jobs.lifecycle.apply_reports) ends where the same reports, applied one
at a time, end; in a number of statements that does not grow with the batch."""

from datetime import timedelta

from django.db import transaction

from jobs import dispatch, lifecycle
from jobs.lifecycle import apply_report, apply_reports
from jobs.models import Job, Pod
from tests.jobs.conftest import T0, bound_jobs, report


def pods_of(job) -> list[Pod]:
    return list(job.pods.order_by("index", "incarnation"))


# Each scenario: (pod count, reports as (pod index, status, exit code, seconds after T0)).
SCENARIOS = [
    (2, [(0, "Running", None, 1), (1, "Running", None, 2), (0, "Succeeded", 0, 3), (1, "Succeeded", 0, 4)]),
    (2, [(0, "Running", None, 1), (1, "Running", None, 2)]),
    (2, [(1, "Running", None, 1)]),
    (1, [(0, "Running", None, 1), (0, "Running", None, 1), (0, "Succeeded", 0, 5)]),
    (1, [(0, "Succeeded", 0, 3)]),  # it finished before its Running report came
    (2, [(0, "Running", None, 1), (0, "Succeeded", 0, 2), (1, "Running", None, 3)]),
    (2, [(0, "Running", None, 1), (1, "Running", None, 1), (1, "Failed", 3, 4)]),  # a failure: not the fast path
    (1, [(0, "Running", None, 1), (0, "Succeeded", 0, 2), (0, "Failed", 1, 3), (0, "Running", None, 4)]),
]


def raw_reports(job, steps) -> list[dict]:
    pods = pods_of(job)
    return [report(pods[i], status, code, T0 + timedelta(seconds=s)) for i, status, code, s in steps]


def outcome(job) -> dict:
    """Everything a report can change about a job (history and events from T0 on)."""
    job.refresh_from_db()
    pods = pods_of(job)
    return {
        "job": (job.status, job.reason_code, job.reason_message, job.running_at, job.finished_at),
        "history": list(job.status_history.filter(at__gte=T0).values_list("previous", "status", "reason", "message", "at")),
        "events": list(job.events.filter(at__gte=T0).values_list("reason", "type", "message", "at")),
        "pods": [(p.status, p.sub_status, p.exit_code, p.started_at, p.finished_at, p.reason_code, p.reason_message)
                 for p in pods],
        # a stop's event is stamped with the wall clock, the reports' with their own time
        "pod events": [[(*e[:3], e[3] if e[3] >= T0 else "now") for e in p.events.values_list(
            "reason", "type", "message", "at")] for p in pods],
    }


def normalized(value, job):
    """Pod and node names differ between two jobs; compare the rest."""
    text = repr(value)
    for pod in pods_of(job)[::-1]:  # a later incarnation's id begins with the first's
        text = text.replace(pod.pod_id, f"pod{pod.index}-{pod.incarnation}")
        if pod.node is not None:  # a new incarnation waits unbound
            text = text.replace(pod.node.name, f"node-of-pod{pod.index}")
    return text.replace(job.job_id, "JOB")


def test_a_batch_ends_where_the_reports_one_at_a_time_end(cluster, cycle, django_capture_on_commit_callbacks):
    shapes = [n for n, _ in SCENARIOS]
    batched, alone = bound_jobs(cluster, cycle, shapes), bound_jobs(cluster, cycle, shapes)

    with django_capture_on_commit_callbacks(execute=True):
        apply_reports([r for job, (_, steps) in zip(batched, SCENARIOS) for r in raw_reports(job, steps)], T0)
    for job, (_, steps) in zip(alone, SCENARIOS):
        for raw in raw_reports(job, steps):
            with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
                apply_report(raw, T0)

    for n, (a, b) in enumerate(zip(batched, alone)):
        assert normalized(outcome(a), a) == normalized(outcome(b), b), f"scenario {n}"
    statuses = [outcome(job)["job"][0] for job in batched]
    assert statuses == ["Succeeded", "Running", "EnvPreparing", "Succeeded", "Succeeded", "Running", "Failed",
                        "Succeeded"]


def test_a_pod_whose_end_report_overtook_its_running_report_still_says_where_and_how_it_ran(cluster, cycle):
    """Two workers may apply the agent's Running and end reports out of order; the end report
    repeats the Running one, so the pod's events hold its Started event either way."""
    batched, alone = bound_jobs(cluster, cycle, [1, 1])
    for job, apply in ((batched, lambda raw: apply_reports([raw], T0)),
                       (alone, lambda raw: apply_report(raw, T0))):
        pod = pods_of(job)[0]
        started = T0 + timedelta(seconds=1)
        with transaction.atomic():
            apply({**report(pod, "Succeeded", 0, T0 + timedelta(seconds=2)),
                   "started": started.isoformat(), "started_message": "podman container of img:1"})
            apply(report(pod, "Running", at=started, message="podman container of img:1"))  # late: ignored
        events = list(pod.events.values_list("reason", "message", "at"))
        assert events == [("Started", f"Pod running on {pod.node}; podman container of img:1", started),
                          ("Succeeded", "Pod Succeeded (exit code 0)", T0 + timedelta(seconds=2))], events


def test_a_batch_takes_the_same_few_statements_for_ten_jobs_or_sixty(cluster, cycle, django_assert_max_num_queries):
    jobs = bound_jobs(cluster, cycle, [1] * 10 + [2] * 25)

    def finish(batch):
        return ([r for job in batch for r in raw_reports(job, [(i, "Running", None, 1) for i in range(job.pods.count())])]
                + [r for job in batch for r in raw_reports(job, [(i, "Succeeded", 0, 2) for i in range(job.pods.count())])])

    few, many = finish(jobs[:10]), finish(jobs[10:])
    with django_assert_max_num_queries(12):
        assert apply_reports(few, T0) == 20
    with django_assert_max_num_queries(12):
        assert apply_reports(many, T0) == 100
    assert {outcome(job)["job"][0] for job in jobs} == {"Succeeded"}


def test_a_pod_changed_under_the_batch_sends_it_one_report_at_a_time(cluster, cycle, monkeypatch):
    """A pod row may change without the job lock (the node-lost reaper marks pods Unknown): the
    batch's write must not overwrite what it did not read. It rolls back and the reports are
    applied alone, each seeing the pod as it is now."""
    first, second = bound_jobs(cluster, cycle, [1, 1])
    write, alone = lifecycle._Batch.write, lifecycle.apply_report

    def other_writer():  # committed in real life; here it would roll back with the batch, so repeat it
        Pod.objects.filter(job=second).update(status="Failed", exit_code=137)

    monkeypatch.setattr(lifecycle._Batch, "write", lambda batch: (other_writer(), write(batch))[1])
    monkeypatch.setattr(lifecycle, "apply_report", lambda raw, now=None: (other_writer(), alone(raw, now))[1])
    raws = raw_reports(first, [(0, "Running", None, 1)]) + raw_reports(second, [(0, "Running", None, 1)])
    assert apply_reports(raws, T0) == 1

    assert [p.status for p in pods_of(first) + pods_of(second)] == ["Running", "Failed"]
    assert outcome(first)["job"][0] == "Running"


def test_a_rejected_report_in_a_batch_drops_only_itself(cluster, cycle):
    first, second = bound_jobs(cluster, cycle, [1, 1])
    raws = raw_reports(first, [(0, "Running", None, 1)]) + [{"pod_id": pods_of(second)[0].pod_id, "status": "Exploded"}]

    assert apply_reports(raws, T0) == 1
    assert [outcome(job)["job"][0] for job in (first, second)] == ["Running", "EnvPreparing"]


# Preempted jobs with fault tolerance on: (pod count, the pods stopped and the stop's reason,
# reports as above, the job's preemption restart limit).
PREEMPTED = [
    (1, [0], dispatch.PREEMPTED, [(0, "Failed", 137, 1)], None),  # re-queued in the batch
    (2, [0, 1], dispatch.PREEMPTED, [(0, "Failed", 137, 1), (1, "Failed", 137, 2)], None),  # the whole gang
    (1, [0], dispatch.SPOT_RELEASED, [(0, "Failed", 137, 1)], None),
    (1, [0], dispatch.PREEMPTED, [(0, "Succeeded", 0, 1)], None),  # it ended as the stop came: evicted all the same
    (1, [0], dispatch.PREEMPTED, [(0, "Failed", 137, 1), (0, "Failed", 137, 1)], None),  # a duplicate
    (2, [0, 1], dispatch.PREEMPTED, [(1, "Failed", 137, 1)], None),  # one of two: Restarting, one at a time
    (2, [0], dispatch.PREEMPTED, [(0, "Failed", 137, 1)], None),  # the other pod is stopped for the restart
    (1, [0], dispatch.PREEMPTED, [(0, "Running", None, 1), (0, "Failed", 137, 2)], None),
    (1, [0], dispatch.PREEMPTED, [(0, "Failed", 137, 1)], 0),  # the limit is reached: the job fails
]


def preempted_jobs(cluster, cycle) -> list:
    jobs = bound_jobs(cluster, cycle, [n for n, *_ in PREEMPTED], restart_on_preemption=True)
    for job, (_, stopped, reason, _, limit) in zip(jobs, PREEMPTED):
        Job.objects.filter(pk=job.pk).update(ft_max_preemption_restarts=limit)
        pods = pods_of(job)
        dispatch.stop_many([dispatch.Stop(pods[i].pod_id, reason, "reclaimed by quota q", 0) for i in stopped],
                           event="Resource Preempted")
    return jobs


def restarted(job) -> dict:
    """outcome, and what a restart changes: the pods' incarnations, the restart records and counts."""
    job.refresh_from_db()
    return {**outcome(job), "restarts": (job.restart_count, job.preemption_restart_count, list(
                job.restarts.values_list("cause", "message", "counted", "at", "running_again_at"))),
            # the first incarnation was created at its submission, the others at the requeue
            "incarnations": [(p.pod_id, p.incarnation, p.current, p.node_id is None, p.incarnation and p.created_at)
                             for p in pods_of(job)]}


def test_a_batch_of_preempted_jobs_ends_where_the_reports_one_at_a_time_end(cluster, cycle,
                                                                            django_capture_on_commit_callbacks):
    batched, alone = preempted_jobs(cluster, cycle), preempted_jobs(cluster, cycle)

    with django_capture_on_commit_callbacks(execute=True):
        apply_reports([r for job, (*_, steps, _) in zip(batched, PREEMPTED) for r in raw_reports(job, steps)], T0)
    for job, (*_, steps, _) in zip(alone, PREEMPTED):
        for raw in raw_reports(job, steps):
            with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
                apply_report(raw, T0)

    for n, (a, b) in enumerate(zip(batched, alone)):
        assert normalized(restarted(a), a) == normalized(restarted(b), b), f"scenario {n}"
    assert [restarted(job)["job"][0] for job in batched] == [
        "Queuing", "Queuing", "Queuing", "Queuing", "Queuing", "Restarting", "Restarting", "Queuing", "Failed"]


def test_a_batch_requeues_ten_preempted_jobs_or_forty_in_the_same_few_statements(cluster, cycle,
                                                                              django_assert_max_num_queries):
    jobs = bound_jobs(cluster, cycle, [1] * 10 + [2] * 15 + [1] * 25, restart_on_preemption=True)
    dispatch.stop_many([dispatch.Stop(p.pod_id, dispatch.PREEMPTED, "reclaimed", 0) for job in jobs
                        for p in pods_of(job)], event="Resource Preempted")

    def ended(batch):
        return [r for job in batch for r in raw_reports(job, [(i, "Failed", 137, 1) for i in range(job.pods.count())])]

    few, many = ended(jobs[:10]), ended(jobs[10:])
    with django_assert_max_num_queries(14):
        assert apply_reports(few, T0) == 10
    with django_assert_max_num_queries(14):
        assert apply_reports(many, T0) == 55
    assert {restarted(job)["job"][0] for job in jobs} == {"Queuing"}
    assert {restarted(job)["restarts"][1] for job in jobs} == {1}
