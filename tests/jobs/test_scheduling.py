from datetime import timedelta

from django.utils import timezone

from jobs.models import Job, JobEvent, Pod, PodEvent
from jobs.scheduling import build_snapshot
from jobs.services import create_job
from quotas.models import Node, NodeStatus, Workspace
from tests.jobs.conftest import CV, NLP, make_request, report


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
    assert [p.pod_id for p in build_snapshot(timezone.now()).pods] == [pod.pod_id]
    reports(report(pod, "Succeeded", exit_code=0))
    assert build_snapshot(timezone.now()).pods == ()


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


def test_a_job_stopped_after_the_snapshot_is_not_admitted(bob, monkeypatch, cycle):
    from jobs import scheduling

    job = create_job(bob, make_request())
    real_plan = scheduling.s.plan

    def plan_then_user_stops(snapshot, now):
        decisions = real_plan(snapshot, now)
        Job.objects.filter(pk=job.pk).update(status="Stopped")  # as stop_job would, meanwhile
        return decisions

    monkeypatch.setattr(scheduling.s, "plan", plan_then_user_stops)
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


def test_deep_queue_positions_are_rewritten_every_few_seconds_the_head_and_new_reasons_at_once(bob, monkeypatch):
    from jobs import scheduling
    from scheduler.decisions import WaitReason

    monkeypatch.setattr(scheduling, "POSITIONS_EXACT", 2)
    monkeypatch.setattr(scheduling, "_positions_refreshed_at", None)
    jobs = [create_job(bob, make_request()) for _ in range(5)]
    now = timezone.now()

    def cycle_at(seconds, positions, message="Quota nlp-team is full"):
        scheduling._store_waiting(tuple(
            WaitReason(j.job_id, "Queuing", "QuotaFull", message if n else "Queued behind job x", "quota:nlp", p)
            for n, (j, p) in enumerate(zip(jobs, positions))), now + timedelta(seconds=seconds))
        return [Job.objects.get(pk=j.pk).queue_position for j in jobs]

    assert cycle_at(0, [1, 2, 3, 4, 5]) == [1, 2, 3, 4, 5]  # first cycle: every position
    # Jobs ahead were admitted: a job that is or was at the head (<= 2) moves at once, a deep one later.
    assert cycle_at(1, [1, 1, 1, 2, 3]) == [1, 1, 1, 2, 5]
    assert cycle_at(4.9, [1, 1, 1, 2, 3]) == [1, 1, 1, 2, 5]
    assert cycle_at(5, [1, 1, 1, 2, 3]) == [1, 1, 1, 2, 3]  # POSITIONS_REFRESH_S later: all of them
    # A changed reason is written at once, whatever the position.
    cycle_at(6, [1, 1, 1, 2, 4], message="Quota nlp-team is full: 16 GPU of 16 GPU in use")
    assert Job.objects.get(pk=jobs[4].pk).wait_reason.endswith("in use")
    assert Job.objects.get(pk=jobs[4].pk).queue_position == 4
