from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

import scheduler
from cycle import apply as cycle_apply
from cycle import schedule
from cycle import snapshot
from cycle import tasks as cycle_tasks
from jobs.models import Job, JobEvent, Pod, PodEvent
from jobs.services import create_job
from quotas.models import Node, NodeStatus, Quota, Workspace
from tests.jobs.conftest import CV, NLP, T0, make_request, report


def bound(job):
    return sorted((p.node.name, tuple(p.gpu_indices), p.kind) for p in job.pods.select_related("node"))


def test_a_cycle_admits_a_job_and_binds_its_pods_in_quota(bob, sent, cycle):
    job = create_job(bob, make_request(pods=2))
    decisions = cycle()
    job.refresh_from_db()
    assert decisions.admission(job.job_id) is not None
    assert job.status == "EnvPreparing" and job.idle_label == "In Quota"
    assert bound(job) == [("nlp-team-gn6v-c8g1-0", tuple(range(8)), "guaranteed"),
                          ("nlp-team-gn6v-c8g1-1", tuple(range(8)), "guaranteed")]
    assert [(m.task, m.queue) for m in sent] == [("agent.start_pods", "agent.simulated")] * 2
    assert job.events.filter(reason="JobAdmitted", message__contains="In Quota").exists()


def test_a_job_submitted_while_the_cycle_waits_for_its_lock_is_not_bound_before_its_submission(bob, cycle, monkeypatch):
    # The cycle's now is read after the cluster: a job that came in while the cycle waited for the
    # lock (as a submitter's commit does) is bound at or after its submission, never before.

    submitted = []
    lock = schedule.hold_cycle_lock

    def lock_then_a_submission():
        lock()
        submitted.append(create_job(bob, make_request(pods=1)))

    monkeypatch.setattr(schedule, "hold_cycle_lock", lock_then_a_submission)
    cycle()
    pod = submitted[0].pods.get()
    assert pod.node is not None and pod.bound_at >= submitted[0].submitted_at


def test_a_job_that_does_not_fit_waits_with_a_reason_and_its_place_in_the_queue(bob, cycle):
    create_job(bob, make_request(pods=2))
    later = create_job(bob, make_request(pods=1))
    cycle()
    later.refresh_from_db()
    assert later.status == "Queuing" and later.queue_position == 1
    assert "nlp-team" in later.wait_reason or NLP in later.wait_reason
    assert not later.pods.filter(node__isnull=False).exists()


def test_a_second_cycle_changes_nothing_that_is_already_decided(bob, sent, cycle):
    create_job(bob, make_request(pods=2))
    cycle()
    sent.clear()
    decisions = cycle()
    assert decisions.admissions == () and sent == []


def test_a_not_ready_node_takes_no_new_pods(bob, cycle):
    Node.objects.filter(name="nlp-team-gn6v-c8g1-0").update(status=NodeStatus.NOT_READY)
    job = create_job(bob, make_request(pods=2))
    cycle()
    assert Job.objects.get(pk=job.pk).status == "Queuing"


def test_the_snapshot_counts_pods_until_their_finish_is_reported(bob, cycle, reports):
    job = create_job(bob, make_request(pods=1))
    cycle()
    pod = job.pods.get()
    reports(report(pod, "Running"))
    assert [p.pod_id for p in cycle_tasks.process_cycle.build_snapshot(timezone.now()).pods] == [pod.pod_id]
    reports(report(pod, "Succeeded", exit_code=0))
    assert cycle_tasks.process_cycle.build_snapshot(timezone.now()).pods == ()


def test_an_acceptable_job_borrows_idle_capacity_and_is_preempted_when_the_lender_needs_it(alice, bob, sent, cycle, reports):
    # bob fills nlp-team, then runs an Acceptable job on cv-team's idle nodes.
    create_job(bob, make_request(pods=2))
    borrower = create_job(bob, make_request(pods=2, oversold_type="AcceptQuotaOverSold"))
    cycle()
    borrower.refresh_from_db()
    assert borrower.status == "EnvPreparing" and borrower.idle_label == "Not in Quota"
    assert {n for n, _, kind in bound(borrower) if kind == "idle"} == {"cv-team-gn6v-c8g1-0", "cv-team-gn6v-c8g1-1"}
    reports(*[report(p, "Running") for p in borrower.pods.all()])

    # alice's guaranteed job on cv-team reclaims both nodes.
    vision = Workspace.objects.get(name="vision-lab")
    lender = create_job(alice, make_request(pods=2, workspace_id=vision.pk, quota_id=CV))
    sent.clear()
    cycle()
    victims = list(borrower.pods.all())
    assert all(p.terminating and p.reason_code == "Preempted" for p in victims)
    assert [(m.task, m.payload["reason"]) for m in sent] == [("agent.stop_pods", "Preempted")] * 2
    event = JobEvent.objects.get(job=borrower, reason="Preempted")
    assert event.message.startswith(f"Resource Preempted: Reclaimed by quota cv-team for job {lender.job_id}")
    assert PodEvent.objects.filter(pod__in=victims, reason="Resource Preempted").count() == 2
    lender.refresh_from_db()
    assert lender.status == "Queuing" and "terminate" in lender.wait_reason

    # Nothing starts on the lender's nodes until the victims are gone.
    sent.clear()
    cycle()
    assert Job.objects.get(pk=lender.pk).status == "Queuing" and sent == []
    reports(*[report(p, "Failed", exit_code=143, reason="Preempted") for p in victims])
    borrower.refresh_from_db()
    assert borrower.status == "Failed" and borrower.reason_code == "Preempted"
    assert all(p.status_label == "Resource Preempted" for p in borrower.pods.all())
    cycle()
    lender.refresh_from_db()
    assert lender.status == "EnvPreparing" and lender.idle_label == "In Quota"
    assert {n for n, _, _ in bound(lender)} == {"cv-team-gn6v-c8g1-0", "cv-team-gn6v-c8g1-1"}


def test_a_preemption_is_one_preempted_event_on_its_victim_and_one_preempting_event_on_its_preemptor(
        alice, bob, cycle, reports):
    create_job(bob, make_request(pods=2))
    borrower = create_job(bob, make_request(pods=2, oversold_type="AcceptQuotaOverSold"))
    cycle()
    reports(*[report(p, "Running") for p in borrower.pods.all()])
    vision = Workspace.objects.get(name="vision-lab")
    lender = create_job(alice, make_request(pods=2, workspace_id=vision.pk, quota_id=CV))
    cycle()
    reports(*[report(p, "Failed", exit_code=143, reason="Preempted") for p in borrower.pods.all()])

    borrower.refresh_from_db()
    assert (borrower.status, borrower.reason_code) == ("Failed", "Preempted")  # PAI's status and reason
    assert list(borrower.events.filter(reason__in=("Preempted", "JobFailed")).values_list("reason", flat=True)) == [
        "Preempted", "JobFailed"]
    preempting = lender.events.get(reason="Preempting")
    assert preempting.message.startswith(f"Preempted job {borrower.job_id} (pods {borrower.job_id}-worker-0, ")
    assert preempting.message.endswith(") to start")


def test_a_job_stopped_after_the_snapshot_is_not_admitted(bob, monkeypatch, cycle):

    job = create_job(bob, make_request())
    real_plan = scheduler.plan

    def plan_then_user_stops(snapshot, now):
        decisions = real_plan(snapshot, now)
        Job.objects.filter(pk=job.pk).update(status="Stopped")  # as stop_job would, meanwhile
        return decisions

    monkeypatch.setattr(scheduler, "plan", plan_then_user_stops)
    cycle()
    assert not Pod.objects.filter(job=job, node__isnull=False).exists()


def test_a_spot_job_waits_in_bidding_below_the_market_price(alice, cycle):
    from decimal import Decimal

    from jobs.services import RoleRequest
    from quotas.models import ResourceSpec
    from spot.models import PriceHistory

    spec = ResourceSpec.objects.get(instance_type="ecs.gn7i-c8g1.2xlarge")
    PriceHistory.objects.create(spec=spec, at=timezone.now() - timedelta(minutes=1), price=Decimal("0.100000"))
    role = RoleRequest(instance_type=spec.instance_type, image="x", spot_strategy="SpotWithPriceLimit",
                       spot_discount_limit=Decimal("0.5"))
    job = create_job(alice, make_request(source="spot", quota_id=None, roles=[role]))
    cycle()
    job.refresh_from_db()
    assert job.status == "Bidding" and "below the market price" in job.wait_reason
    PriceHistory.objects.create(spec=spec, at=timezone.now(), price=Decimal("0.050000"))
    cycle()
    job.refresh_from_db()
    assert job.status == "EnvPreparing" and job.pods.get().kind == "spot"


def test_a_cycle_reads_a_waiting_job_once_and_again_only_after_it_changed(bob, cycle, monkeypatch):
    from cycle import waiting
    from jobs.services import stop_job, update_job_priority

    read = []
    details = waiting._read_details
    monkeypatch.setattr(waiting, "_read_details", lambda pks: read.append(list(pks)) or details(pks))
    create_job(bob, make_request(pods=2))  # takes both nodes of the quota
    cycle()
    first, second = create_job(bob, make_request()), create_job(bob, make_request())
    read.clear()
    now = timezone.now()
    assert [j.job_id for j in cycle_tasks.process_cycle.build_snapshot(now).jobs] == [first.job_id, second.job_id]
    assert read == [[first.pk, second.pk]]
    read.clear()
    assert [j.job_id for j in cycle_tasks.process_cycle.build_snapshot(now).jobs] == [first.job_id, second.job_id] and read == []
    update_job_priority(bob, second, 7)  # a save: the job's modified_at moves
    assert {j.job_id: j.priority for j in cycle_tasks.process_cycle.build_snapshot(now).jobs} == {first.job_id: 1, second.job_id: 7}
    assert read == [[second.pk]]
    stop_job(bob, first)
    assert [j.job_id for j in cycle_tasks.process_cycle.build_snapshot(now).jobs] == [second.job_id]


def test_a_cycle_plans_the_head_of_each_queue_and_places_the_rest_behind_it(bob, monkeypatch, cycle, reports):
    from cycle import waiting

    monkeypatch.setattr(waiting, "QUEUE_DEPTH", 1)
    monkeypatch.setattr(waiting, "PLAN_BUDGET", 0)
    running = create_job(bob, make_request(pods=2))  # both nodes of nlp-team
    cycle()
    jobs = [create_job(bob, make_request(priority=p)) for p in (1, 1, 5, 1)]
    in_order = [jobs[2], jobs[0], jobs[1], jobs[3]]  # priority, then submit time

    def rows():
        return [Job.objects.get(pk=j.pk) for j in in_order]

    decisions = cycle()
    assert [w.job_id for w in decisions.waiting] == [jobs[2].job_id]  # only the head was planned
    assert [j.queue_position for j in rows()] == [1, 2, 3, 4]
    assert "nlp-team" in rows()[0].wait_reason
    assert all("behind the jobs each schedule cycle considers first" in j.wait_reason for j in rows()[1:])
    for pod in running.pods.all():
        reports(report(pod, "Running"), report(pod, "Succeeded", exit_code=0))
    # Two nodes are free, but the one job deeper than the depth is not backfilled this cycle ...
    assert [a.job_id for a in cycle().admissions] == [jobs[2].job_id]
    # ... it is the next, once it leads the queue; the positions at the head that moved are written
    # once HEAD_MOVES_EVERY_S passed.
    later = timezone.now() + timedelta(seconds=waiting.HEAD_MOVES_EVERY_S)
    assert [a.job_id for a in cycle(later).admissions] == [jobs[0].job_id]
    assert [(j.status, j.queue_position) for j in rows()[2:]] == [("Queuing", 1), ("Queuing", 2)]


def test_a_cycle_builds_no_reason_for_a_job_deep_in_its_queue_that_it_would_not_rewrite(bob, monkeypatch, cycle):
    from cycle import waiting

    monkeypatch.setattr(waiting, "QUEUE_DEPTH", 1)
    monkeypatch.setattr(waiting, "PLAN_BUDGET", 0)
    monkeypatch.setattr(waiting, "POSITIONS_EXACT", 2)
    create_job(bob, make_request(pods=2))  # both nodes of nlp-team
    cycle()
    jobs = [create_job(bob, make_request()) for _ in range(5)]
    cycle()  # new jobs: every reason and position written
    assert [Job.objects.get(pk=j.pk).queue_position for j in jobs] == [1, 2, 3, 4, 5]
    built = []
    deeper = waiting.WaitingJobs._deeper_reasons
    monkeypatch.setattr(waiting.WaitingJobs, "_deeper_reasons",
                        lambda self, *args: built.append(found := deeper(self, *args)) or found)
    cycle()  # nothing moved; no refresh is due within POSITIONS_REFRESH_S
    # Only the deep job at an exact position (<= 2) gets a reason to compare; the rest keep theirs.
    assert [(entry.pk, w.position) for entry, w in built[0]] == [(jobs[1].pk, 2)]
    assert [Job.objects.get(pk=j.pk).queue_position for j in jobs] == [1, 2, 3, 4, 5]


def test_a_cycle_followed_at_once_by_another_leaves_the_reasons_to_it_for_a_while(
        bob, django_capture_on_commit_callbacks):

    limit = schedule.REASONS_DEFER_MAX_S

    def cycle_at(seconds, next_at_once):
        with django_capture_on_commit_callbacks(execute=True):
            cycle_tasks.process_cycle.run(T0 + timedelta(seconds=seconds), defer_reasons=lambda: next_at_once)

    def reason(job):
        return Job.objects.get(pk=job.pk).wait_reason

    create_job(bob, make_request(pods=2))  # both nodes of nlp-team
    cycle_at(0, True)  # no reasons written yet: not deferred
    waits = create_job(bob, make_request())
    cycle_at(0.5, True)
    assert reason(waits) == ""  # left to the next cycle
    cycle_at(0.6, False)  # the task rests after this one: written
    assert "nlp-team" in reason(waits)
    later = create_job(bob, make_request())
    cycle_at(0.5 + limit, True)
    assert reason(later) == ""
    cycle_at(0.6 + limit, True)  # the limit since the last write: written though the next follows at once
    assert "nlp-team" in reason(later)


def test_a_cycle_that_admits_every_job_it_planned_of_a_deeper_queue_is_followed_by_the_next_at_once(
        bob, monkeypatch, cycle_requests, django_capture_on_commit_callbacks):
    from cycle import waiting

    monkeypatch.setattr(waiting, "QUEUE_DEPTH", 1)
    monkeypatch.setattr(waiting, "PLAN_BUDGET", 0)
    monkeypatch.setattr(cycle_tasks.process_cycle, "rest_until", 0.0)
    jobs = [create_job(bob, make_request()) for _ in range(3)]  # nlp-team has two nodes
    cycle_requests.clear()

    def paced_cycle():
        with django_capture_on_commit_callbacks(execute=True):
            return cycle_tasks.process_cycle.run_paced()

    assert [a.job_id for a in paced_cycle().admissions] == [jobs[0].job_id]
    assert cycle_requests == [1] and cycle_tasks.process_cycle.rest_until == 0.0  # no rest: the next one at once
    assert [a.job_id for a in paced_cycle().admissions] == [jobs[1].job_id]
    assert cycle_requests == [1, 1] and cycle_tasks.process_cycle.rest_until == 0.0
    assert paced_cycle().admissions == ()  # no node left: it rests, and asks for nothing
    assert cycle_requests == [1, 1] and cycle_tasks.process_cycle.rest_until > 0


def test_a_single_long_queue_is_planned_to_its_share_of_the_budget(monkeypatch):
    from datetime import datetime
    from datetime import timezone as tz

    from cycle import waiting

    monkeypatch.setattr(waiting, "QUEUE_DEPTH", 2)
    monkeypatch.setattr(waiting, "PLAN_BUDGET", 6)
    t0 = datetime(2026, 1, 1, tzinfo=tz.utc)

    def job(n, quota, source=scheduler.SOURCE_QUOTA):
        return scheduler.PendingJob(f"j{n:02d}", t0 + timedelta(seconds=n), (), quota, source=source)

    def window(jobs):
        queues = waiting._Queues()
        for n, j in enumerate(jobs):
            queues.add(waiting._Entry(n, (j.job_id, ""), j))
        return queues.window()

    one_queue = [job(n, "a") for n in range(8)]
    planned, deeper = window(reversed(one_queue))  # the queue's order, not the order they came in
    assert [j.job_id for j in planned] == [f"j{n:02d}" for n in (5, 4, 3, 2, 1, 0)]  # all of the budget; pk order
    assert [e.job.job_id for e in deeper["quota:a"]] == ["j06", "j07"]
    four = [job(n, "abcd"[n % 4]) for n in range(16)] + [job(99, None, scheduler.SOURCE_SPOT)]
    planned, deeper = window(four)
    assert len(planned) == 4 * 2 + 1 and sum(map(len, deeper.values())) == 8  # QUEUE_DEPTH each; spot all


def test_the_queues_stay_in_order_as_jobs_come_and_go():
    from datetime import datetime
    from datetime import timezone as tz

    from cycle import waiting

    t0 = datetime(2026, 1, 1, tzinfo=tz.utc)
    jobs = [scheduler.PendingJob(f"j{n}", t0 + timedelta(seconds=n % 3), (), "a", priority=1 + n % 2) for n in range(6)]
    entries = [waiting._Entry(n, (j.job_id, ""), j) for n, j in enumerate(jobs)]
    queues = waiting._Queues()
    for entry in entries:
        queues.add(entry)
    queues.remove(entries[3])

    def order():
        return [e.job.job_id for e in queues.queues["quota:a"]]

    assert order() == ["j1", "j5", "j0", "j4", "j2"]  # priority, then submit time, then job id
    queues.remove(entries[1])
    queues.add(entries[3])
    assert order() == ["j3", "j5", "j0", "j4", "j2"]


def store_at(capture, jobs, now, positions, message="Quota nlp-team is full", code="QuotaFull") -> list[int]:
    """Store wait reasons for `jobs` at `now` as a cycle would (the first held behind the head);
    returns their stored positions."""
    from scheduler.decisions import WaitReason

    with capture(execute=True):  # what was written is remembered on commit
        cycle_tasks.process_cycle.waiting.read()
        cycle_tasks.process_cycle.waiting.store(tuple(
            WaitReason(j.job_id, "Queuing", code if n else "HeldBehindHead", message if n else "Queued behind x",
                       "quota:nlp", p)
            for n, (j, p) in enumerate(zip(jobs, positions))), now)
    return [Job.objects.get(pk=j.pk).queue_position for j in jobs]


def test_new_numbers_and_deep_positions_wait_for_the_refresh_new_reasons_and_head_positions_do_not(
        bob, monkeypatch, django_capture_on_commit_callbacks):
    from cycle import waiting

    monkeypatch.setattr(waiting, "POSITIONS_EXACT", 2)
    jobs = [create_job(bob, make_request()) for _ in range(5)]
    now = timezone.now()

    def cycle_at(seconds, positions, **reason):
        return store_at(django_capture_on_commit_callbacks, jobs, now + timedelta(seconds=seconds), positions, **reason)

    def reason(n):
        return Job.objects.get(pk=jobs[n].pk).wait_reason

    assert cycle_at(0, [1, 2, 3, 4, 5]) == [1, 2, 3, 4, 5]  # first cycle: every position
    # Jobs ahead were admitted: a job that is or was at the head (<= 2) moves once HEAD_MOVES_EVERY_S
    # passed since its position was written, a deep one at the refresh.
    assert cycle_at(1, [1, 1, 1, 2, 3]) == [1, 2, 3, 4, 5]
    assert cycle_at(2, [1, 1, 1, 2, 3]) == [1, 1, 1, 2, 5]
    assert cycle_at(9.9, [1, 1, 1, 2, 3]) == [1, 1, 1, 2, 5]
    assert cycle_at(10, [1, 1, 1, 2, 3]) == [1, 1, 1, 2, 3]  # POSITIONS_REFRESH_S later: all of them
    # New numbers in the same reason wait for the refresh, at the head too.
    cycle_at(11, [1, 1, 1, 2, 3], message="Quota nlp-team is full: 16 GPU of 16 GPU in use")
    assert reason(3) == reason(4) == "Quota nlp-team is full"
    cycle_at(20, [1, 1, 1, 2, 3], message="Quota nlp-team is full: 16 GPU of 16 GPU in use")
    assert reason(3).endswith("in use") and reason(4).endswith("in use")
    # A new reason is written at once, whatever the position.
    cycle_at(21, [1, 1, 1, 2, 4], message="No idle capacity in cohort", code="NoIdleCapacity")
    assert reason(4) == "No idle capacity in cohort" and Job.objects.get(pk=jobs[4].pk).queue_position == 4
    # A row changed behind this process's back is repaired at the refresh.
    Job.objects.filter(pk=jobs[4].pk).update(wait_reason="stale", queue_position=9)
    assert cycle_at(22, [1, 1, 1, 2, 4], message="No idle capacity in cohort", code="NoIdleCapacity")[4] == 9
    assert cycle_at(30, [1, 1, 1, 2, 4], message="No idle capacity in cohort", code="NoIdleCapacity")[4] == 4
    assert reason(4) == "No idle capacity in cohort"


def test_a_refresh_is_spread_over_cycles_a_chunk_of_jobs_each(bob, monkeypatch, django_capture_on_commit_callbacks):
    from cycle import waiting

    monkeypatch.setattr(waiting, "POSITIONS_EXACT", 0)  # no position is written at once
    monkeypatch.setattr(waiting, "REFRESH_CHUNK", 2)
    jobs = [create_job(bob, make_request()) for _ in range(5)]
    now = timezone.now()

    def cycle_at(seconds, positions):
        return store_at(django_capture_on_commit_callbacks, jobs, now + timedelta(seconds=seconds), positions)

    assert cycle_at(0, [1, 2, 3, 4, 5]) == [1, 2, 3, 4, 5]  # new jobs: at once; a refresh begins
    assert cycle_at(1, [11, 12, 13, 14, 15]) == [1, 2, 13, 14, 5]  # it goes on: the next two
    assert cycle_at(2, [21, 22, 23, 24, 25]) == [1, 2, 13, 14, 25]  # and the last one
    assert cycle_at(3, [31, 32, 33, 34, 35]) == [1, 2, 13, 14, 25]  # nothing until the next is due
    assert cycle_at(10, [41, 42, 43, 44, 45]) == [41, 42, 13, 14, 25]
    assert cycle_at(10.5, [51, 52, 53, 54, 55]) == [41, 42, 53, 54, 25]
    assert cycle_at(11, [61, 62, 63, 64, 65]) == [41, 42, 53, 54, 65]


def test_a_refresh_rewrites_a_deep_position_once_it_moved_by_more_than_a_tenth(
        bob, monkeypatch, django_capture_on_commit_callbacks):
    from cycle import waiting

    monkeypatch.setattr(waiting, "POSITIONS_EXACT", 2)
    jobs = [create_job(bob, make_request()) for _ in range(5)]
    now = timezone.now()

    def cycle_at(seconds, positions):
        return store_at(django_capture_on_commit_callbacks, jobs, now + timedelta(seconds=seconds), positions)

    assert cycle_at(0, [1, 2, 30, 40, 50]) == [1, 2, 30, 40, 50]
    assert cycle_at(10, [1, 2, 28, 40, 44]) == [1, 2, 30, 40, 44]  # 30 -> 28 is within a tenth, 50 -> 44 not
    assert cycle_at(20, [1, 2, 26, 37, 44]) == [1, 2, 26, 40, 44]
    assert cycle_at(30, [1, 3, 26, 37, 44]) == [1, 3, 26, 40, 44]  # at the head: exact


def test_a_cycle_whose_pods_changed_since_its_snapshot_rolls_back_and_binds_nothing(bob):

    job = create_job(bob, make_request(pods=2))
    now = timezone.now()
    decisions = scheduler.plan(cycle_tasks.process_cycle.build_snapshot(now), now)
    assert decisions.admission(job.job_id) is not None
    Pod.objects.filter(pk=job.pods.order_by("index").first().pk).update(current=False)  # replaced meanwhile
    with pytest.raises(RuntimeError, match="1 admitted pods were not waiting to be bound"), transaction.atomic():
        cycle_apply.apply(decisions, now, cycle_tasks.process_cycle.waiting)
    assert not job.pods.filter(node__isnull=False).exists()
    assert Job.objects.get(pk=job.pk).status == "Queuing"


def test_pods_with_their_own_resources_share_a_node_best_fit_on_distinct_gpus(bob, cycle):
    from jobs.services import PodResources, RoleRequest

    def own(gpus: int, pods: int = 1):
        return make_request(roles=[RoleRequest(pod_count=pods, image="x", resources=PodResources(gpus, 8, 32768))])

    pair, small, whole = create_job(bob, own(3, pods=2)), create_job(bob, own(2)), create_job(bob, own(8))
    too_many = create_job(bob, own(1))
    cycle()
    first, second = "nlp-team-gn6v-c8g1-0", "nlp-team-gn6v-c8g1-1"
    # The pair fills the first node best-fit, the 2-GPU pod takes its last two GPUs, the 8-GPU pod the
    # second node: the quota's 16 GPUs are all held and the 1-GPU job waits.
    assert [(node, len(gpus)) for node, gpus, _ in bound(pair)] == [(first, 3), (first, 3)]
    assert [(node, len(gpus)) for node, gpus, _ in bound(small)] == [(first, 2)]
    assert [(node, len(gpus)) for node, gpus, _ in bound(whole)] == [(second, 8)]
    on_first = [g for job in (pair, small) for _, gpus, _ in bound(job) for g in gpus]
    assert sorted(on_first) == list(range(8))
    too_many.refresh_from_db()
    assert too_many.status == "Queuing" and not too_many.pods.filter(node__isnull=False).exists()


def test_the_waiting_jobs_stay_in_pk_order_when_an_older_one_changes_and_newer_ones_come(bob, monkeypatch):
    from cycle import waiting
    from jobs.services import update_job_priority

    details = waiting._read_details  # whatever order the database gives the rows in
    monkeypatch.setattr(waiting, "_read_details", lambda pks: details(pks)[::-1])
    waiting_jobs = waiting.WaitingJobs()
    jobs = [create_job(bob, make_request()) for _ in range(3)]
    assert [j.job_id for j in waiting_jobs.read()] == [j.job_id for j in jobs]
    update_job_priority(bob, jobs[0], 9)  # a new version of the oldest: read again, and placed by its pk
    jobs.append(create_job(bob, make_request()))
    read = waiting_jobs.read()
    assert [j.job_id for j in read] == [j.job_id for j in jobs] and read[0].priority == 9
    Job.objects.filter(pk=jobs[1].pk).delete()  # one leaves; the others are read from memory
    assert [j.job_id for j in waiting_jobs.read()] == [jobs[n].job_id for n in (0, 2, 3)]
    assert waiting_jobs.pod_pks(jobs[1].job_id) == {} and waiting_jobs.pod_pks(jobs[3].job_id)


def test_a_cycle_admits_any_number_of_jobs_in_the_same_number_of_queries(bob, cycle):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    now = timezone.now()  # one clock: the first cycle's refresh of stored reasons is the only one

    def queries_of_a_cycle_admitting(count: int) -> int:
        jobs = [create_job(bob, make_request()) for _ in range(count)]  # a node of nlp-team each
        with CaptureQueriesContext(connection) as queries:
            assert len(cycle(now).admissions) == count
        Pod.objects.filter(job__in=jobs).update(status="Succeeded", finished_at=now)  # the nodes are free again
        Job.objects.filter(pk__in=[j.pk for j in jobs]).update(status="Succeeded")
        return len(queries.captured_queries)

    queries_of_a_cycle_admitting(1)
    assert queries_of_a_cycle_admitting(1) == queries_of_a_cycle_admitting(2)




@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner")
def test_a_cycle_reads_the_live_pods_with_a_plain_index_scan_where_the_planner_prefers_another(db, monkeypatch):
    """The live pods' partial index keeps an ended pod's entry until VACUUM; only a plain index
    scan marks such entries dead so that later scans skip them, a bitmap scan never does
    (cycle/schedule.py _plain_index_scans), nor does a scan of the table. In
    bench/kueue_baseline.py the planner chose the bitmap scan; here its costs are set so that it
    does not choose the plain index scan either."""
    from bench import harness

    team = harness.make_team("dead")
    spec = harness.make_spec("sim.1gpu", 1)
    quota = harness.make_quota(team, "dead")
    node = Node.objects.get(name=harness.make_nodes(quota, spec, 1, "dead")[0])
    job = harness.submit(team, quota, spec, duration_s=1)
    Pod.objects.bulk_create(Pod(pod_id=f"dead-{i}", job=job, role="Worker", index=i, node=node, status="Running")
                            for i in range(1, 2001))
    Pod.objects.filter(pod_id__startswith="dead-", index__gt=100).update(status="Succeeded")
    query = snapshot._live_pods()
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_pod")  # statistics from while a few pods ran, as in a busy cluster
        # The index looks dear: its pages random, each of its entries costly to read.
        cursor.execute("SET LOCAL random_page_cost = 1000")
        cursor.execute("SET LOCAL cpu_index_tuple_cost = 1")

    def plan() -> str:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql, params)
            return "\n".join(row[0] for row in cursor.fetchall())

    assert "Index Scan using pod_live_bound" not in plan()  # the planner's own choice: a bitmap or a table scan
    plans = []
    monkeypatch.setattr(snapshot, "_live_pods", lambda: plans.append(plan()) or query)
    assert len(snapshot._running_pods()) == 100
    assert "Index Scan using pod_live_bound" in plans[0] and "Bitmap" not in plans[0]
    with connection.cursor() as cursor:  # the settings ended with the read
        cursor.execute("SELECT current_setting('enable_bitmapscan'), current_setting('enable_seqscan')")
        assert cursor.fetchone() == ("on", "on")


def test_the_cycle_starts_a_gang_as_its_rows_say_without_reading_them_back(bob, cycle, sent):
    """The start messages are built from the waiting jobs the cycle read (cycle/schedule.py
    _admit_all); they are the ones dispatch.start_messages_for reads from the bound rows."""
    from jobs import dispatch
    from jobs.services import RoleRequest

    V100 = "ecs.gn6v-c8g1.16xlarge"
    job = create_job(bob, make_request(envs={"LR": "0.1"}, roles=[
        RoleRequest(role="Worker", pod_count=1, instance_type=V100, image="pytorch:2.5", command="python worker.py"),
        RoleRequest(role="Master", pod_count=1, instance_type=V100, image="pytorch:2.5")]))
    cycle()

    job.refresh_from_db()
    assert job.status == "EnvPreparing"
    started = [m for m in sent if m.task == dispatch.START_POD]
    assert started == dispatch.start_messages_for([job])
    assert [(m.payload["role"], m.payload["env"]["RANK"], m.payload["command"]) for m in started] == [
        ("Worker", "0", "python worker.py"), ("Master", "1", "python train.py")]


def test_a_reserved_8_gpu_job_starts_while_1_gpu_jobs_keep_arriving(bob, cycle, reports):
    from jobs.services import PodResources, RoleRequest

    def gpus(n: int):
        return make_request(roles=[RoleRequest(image="x", resources=PodResources(n, 4, 16384))])

    Quota.objects.filter(name="nlp-team").update(backfill=True)
    first, second = "nlp-team-gn6v-c8g1-0", "nlp-team-gn6v-c8g1-1"
    small = [create_job(bob, gpus(1)) for _ in range(16)]  # nlp-team's 16 GPUs, one a job
    cycle()
    reports(*[report(job.pods.get(), "Running") for job in small])
    big = create_job(bob, gpus(8))
    for step in range(8):
        # A 1-GPU job ends on each node and two more arrive: without the reservation they would
        # take every GPU that frees, and a whole node would never be free for the 8-GPU job.
        for node in (first, second):
            done = Pod.objects.filter(node__name=node, status="Running").order_by("pk")[:1]
            reports(*[report(p, "Succeeded", 0) for p in done])
        arrivals = [create_job(bob, gpus(1)) for _ in range(2)]
        cycle()
        big.refresh_from_db()
        if big.status != "Queuing":
            break
        assert big.wait_reason.startswith(f"Reserved node {first} from about "), big.wait_reason
        reports(*[report(p, "Running") for job in arrivals for p in job.pods.filter(node__isnull=False)])
    assert (big.status, step) == ("EnvPreparing", 7)
    assert bound(big) == [(first, tuple(range(8)), "guaranteed")]
    assert Job.objects.filter(status="Queuing").count() == 8  # a 1-GPU job a step could not start
