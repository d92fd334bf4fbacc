"""jobs.usage_history against hand-computed figures: GPU-hours of pods cut by the range at both ends,
read from the pods or from their daily roll-up alike, nearest-rank queueing percentiles, and
preemptions with the work they lost."""

from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.db.models import Q

from jobs.models import Accessibility, GpuDayUse, Job, Pod, PodKind
from jobs.services import delete_job
from jobs.states import JobStatus, PodStatus, PodSubStatus
from jobs.usage_history import gpu_use, preemptions, queue_times, roll_up
from quotas.models import Quota, Workspace
from tests.pg_plans import plans_of, reads

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 3, 2, tzinfo=timezone.utc)  # the range: all of 2 March
START, END = DAY, DAY + timedelta(days=1)
FIRST = LAST = DAY.date()
LATER = DAY + timedelta(days=3)


def at(hours: float) -> datetime:
    """`hours` after the range's start (negative: before it)."""
    return DAY + timedelta(hours=hours)


def job(user, *, quota="nlp-team", workspace="ml-research", **fields) -> Job:
    n = Job.objects.count()
    return Job.objects.create(
        job_id=f"dlchist{n:05d}", workspace=Workspace.objects.get(name=workspace), user=user,
        display_name=f"j{n}", user_command="true", quota=Quota.objects.get(name=quota) if quota else None, **fields)


def pod(owner: Job, gpu: int, kind: str, started, finished, **fields) -> Pod:
    index = owner.pods.count()
    fields = {"status": PodStatus.SUCCEEDED if finished else PodStatus.RUNNING, **fields}
    return Pod.objects.create(pod_id=f"{owner.job_id}-worker-{index}", job=owner, role="Worker", index=index, gpu=gpu,
                              kind=kind, started_at=started, finished_at=finished, **fields)


def hours_by(uses, key) -> dict:
    sums = {}
    for use in uses:
        sums[key(use)] = sums.get(key(use), 0) + use.gpu_seconds / 3600
    return {k: round(v, 6) for k, v in sums.items()}


@pytest.fixture(params=[False, True], ids=["from the pods", "rolled up"])
def settle(request):
    """Before reading: nothing (the pods are summed one by one), or roll up the finished ones."""
    return roll_up if request.param else lambda: 0


def test_gpu_hours_count_only_the_part_of_each_pod_inside_the_range(alice, bob, settle):
    research = job(alice)
    pod(research, 8, PodKind.GUARANTEED, at(-2), at(2))  # cut at the start: 2 h x 8
    pod(job(bob, oversold_type="ForceQuotaOverSold"), 4, PodKind.IDLE, at(23), at(25.5))  # cut at the end: 1 h x 4
    pod(job(alice, quota=None, source="spot"), 2, PodKind.SPOT, at(-4), at(29))  # cut at both ends: 24 h x 2
    pod(job(bob, quota=None, source="public"), 1, PodKind.PAYG, at(12), None)  # still running: 12 h x 1
    vision = job(alice, quota="cv-team", workspace="vision-lab")
    pod(vision, 3, PodKind.GUARANTEED, at(1), at(1.5))  # inside: 0.5 h x 3
    pod(vision, 8, PodKind.GUARANTEED, at(-14), at(-12))  # before the range
    pod(vision, 8, PodKind.GUARANTEED, at(-1), at(0))  # ends as the range begins
    pod(vision, 8, PodKind.GUARANTEED, at(24), at(26))  # starts as it ends
    pod(vision, 0, PodKind.GUARANTEED, at(1), at(5))  # no GPU
    pod(vision, 8, PodKind.GUARANTEED, None, None)  # never started

    settle()
    uses = gpu_use(Q(), FIRST, LAST, now=LATER)

    assert hours_by(uses, lambda u: u.source) == {"guaranteed": 16 + 1.5, "idle": 4, "spot": 48, "public": 12}
    names = {w.pk: w.name for w in Workspace.objects.all()}
    assert hours_by(uses, lambda u: names[u.workspace_id]) == {"ml-research": 16 + 4 + 48 + 12, "vision-lab": 1.5}
    assert hours_by(uses, lambda u: u.user_id) == {alice.pk: 16 + 48 + 1.5, bob.pk: 4 + 12}
    quotas = {q.pk: q.name for q in Quota.objects.all()} | {None: "public"}
    assert hours_by(uses, lambda u: quotas[u.quota_id]) == {"nlp-team": 20, "cv-team": 1.5, "public": 60}


def test_a_running_pod_counts_up_to_now_and_the_jobs_given_limit_the_sum(alice, bob, settle):
    pod(job(alice), 8, PodKind.GUARANTEED, at(6), None)
    pod(job(alice), 1, PodKind.GUARANTEED, at(1), at(2))
    pod(job(bob), 2, PodKind.GUARANTEED, at(6), None)
    pod(job(bob), 2, PodKind.GUARANTEED, at(1), at(3))
    settle()
    uses = gpu_use(Q(user=alice), FIRST, LAST, now=at(9.5))
    assert hours_by(uses, lambda u: u.user_id) == {alice.pk: 8 * 3.5 + 1}


def test_a_roll_up_splits_a_pod_at_utc_midnights_and_counts_each_pod_once(alice, bob):
    long = pod(job(alice), 2, PodKind.GUARANTEED, at(-6), at(30))  # 6 h on 1 March, 24 h, 6 h on 3 March
    pod(job(alice), 4, PodKind.GUARANTEED, at(1), at(2))
    running = pod(job(bob), 8, PodKind.IDLE, at(20), None)

    assert roll_up() == 2 and roll_up() == 0
    by_day = {}
    for row in GpuDayUse.objects.all():
        by_day[row.day.isoformat()] = by_day.get(row.day.isoformat(), 0) + row.gpu_seconds / 3600
    assert by_day == {"2026-03-01": 12, "2026-03-02": 48 + 4, "2026-03-03": 12}
    assert Pod.objects.get(pk=long.pk).rolled_up and not Pod.objects.get(pk=running.pk).rolled_up
    # Three days from the roll-up, and the running pod from its row up to now.
    uses = gpu_use(Q(), FIRST - timedelta(days=1), LAST + timedelta(days=1), now=at(26))
    assert hours_by(uses, lambda u: u.user_id) == {alice.pk: 12 + 52 + 12, bob.pk: 8 * 6}

    # A pod that ends later is rolled up then, into the rows already there.
    Pod.objects.filter(pk=running.pk).update(finished_at=at(22), status=PodStatus.SUCCEEDED)
    assert roll_up() == 1
    assert hours_by(gpu_use(Q(), FIRST, LAST, now=LATER), lambda u: u.source) == {"guaranteed": 52, "idle": 16}
    assert GpuDayUse.objects.filter(day=FIRST, user=alice).count() == 1


def test_a_deleted_job_leaves_the_roll_up_as_it_leaves_the_pods(alice, settle):
    kept, deleted = job(alice), job(alice, accessibility=Accessibility.PRIVATE)
    pod(kept, 1, PodKind.GUARANTEED, at(1), at(3))
    pod(deleted, 8, PodKind.GUARANTEED, at(1), at(3))
    pod(deleted, 8, PodKind.GUARANTEED, at(20), at(28))
    Job.objects.filter(pk__in=[kept.pk, deleted.pk]).update(status=JobStatus.SUCCEEDED)
    settle()

    delete_job(alice, deleted)

    assert hours_by(gpu_use(Q(), FIRST, LAST + timedelta(days=1), now=LATER), lambda u: u.user_id) == {alice.pk: 2}
    assert not GpuDayUse.objects.filter(accessibility=Accessibility.PRIVATE).exists()


def test_queueing_percentiles_are_nearest_rank_per_quota(alice):
    for minutes in (70, 10, 100, 30, 50, 20, 90, 40, 80, 60):
        job(alice, submitted_at=at(5), running_at=at(5) + timedelta(minutes=minutes))
    for minutes in (5, 1, 3):
        job(alice, quota="cv-team", workspace="vision-lab", submitted_at=at(1),
            running_at=at(1) + timedelta(minutes=minutes))
    job(alice, submitted_at=at(-5), running_at=at(-1))  # first ran before the range
    job(alice, submitted_at=at(2))  # still queuing
    job(alice, quota=None, source="spot", created_at=at(3), running_at=at(3.5))  # no submitted_at: from its creation

    times = queue_times(Job.objects.all(), START, END)

    nlp, cv = Quota.objects.get(name="nlp-team").pk, Quota.objects.get(name="cv-team").pk
    minutes = {q: (t.jobs, round(t.p50_s / 60, 6), round(t.p95_s / 60, 6)) for q, t in times.items()}
    # 10 waits: p50 is the 5th (50 min), p95 the 10th; 3 waits 1, 3, 5: the 2nd and the 3rd.
    assert minutes == {nlp: (10, 50, 100), cv: (3, 3, 5), None: (1, 30, 30)}


def test_preemptions_cost_the_gpu_hours_since_the_last_checkpoint_or_the_start(alice, bob):
    reclaimed = job(alice, last_checkpoint_at=at(13))
    for _ in range(2):  # both pods of the job, run 10:00-14:00, checkpoint at 13:00: 1 h x 8 each
        pod(reclaimed, 8, PodKind.IDLE, at(10), at(14), sub_status=PodSubStatus.EVICTED, reason_code="Preempted")
    # A checkpoint written by a later run is not this pod's: it lost all of its 3 hours.
    later = job(bob, quota=None, source="spot", last_checkpoint_at=at(20))
    pod(later, 2, PodKind.SPOT, at(9), at(12), sub_status=PodSubStatus.EVICTED, reason_code="SpotReleased")
    pod(later, 2, PodKind.SPOT, at(-9), at(-5), sub_status=PodSubStatus.EVICTED, reason_code="SpotReleased")  # before
    pod(job(bob), 8, PodKind.GUARANTEED, at(1), at(2), status=PodStatus.FAILED)  # failed, not preempted

    found = preemptions(Job.objects.all(), START, END)

    nlp = Quota.objects.get(name="nlp-team").pk
    assert {(p.quota_id, p.reason, p.pods, p.jobs, round(p.lost_gpu_seconds / 3600, 6)) for p in found} == {
        (nlp, "Preempted", 2, 1, 16), (None, "SpotReleased", 1, 1, 6)}



def test_rows_two_roll_ups_added_for_one_key_are_folded_and_forget_takes_from_both(alice):
    first, second = job(alice), job(alice)
    pod(first, 1, PodKind.GUARANTEED, at(1), at(2))
    roll_up()
    pod(second, 2, PodKind.GUARANTEED, at(3), at(4))
    row = GpuDayUse.objects.get()
    GpuDayUse.objects.create(day=row.day, workspace_id=row.workspace_id, quota_id=row.quota_id, user=alice,
                             accessibility=row.accessibility, kind=row.kind, gpu_seconds=3600)  # as a twin roll-up would
    roll_up()
    assert [r.gpu_seconds for r in GpuDayUse.objects.all()] == [3600 * 4]

    Job.objects.filter(pk=second.pk).update(status=JobStatus.SUCCEEDED)
    delete_job(alice, second)
    assert [r.gpu_seconds for r in GpuDayUse.objects.all()] == [3600 * 2]


def test_the_beat_rolls_up_finished_pods_every_minute(settings, alice):
    from jobs.tasks import roll_up_usage

    entry = {e["task"]: e for e in settings.CELERY_BEAT_SCHEDULE.values()}["jobs.tasks.roll_up_usage"]
    assert entry["schedule"] == 60 and entry["options"]["queue"] == "default"
    pod(job(alice), 1, PodKind.GUARANTEED, at(1), at(2))
    assert roll_up_usage() == 1 and GpuDayUse.objects.get().gpu_seconds == 3600


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the covering indexes are PostgreSQL's")
def test_the_usage_sums_read_their_covering_indexes(alice):
    """A change to a filter (an OR, a parameter in place of EndOrNever's constant) or to an index would
    leave the Usage page reading every job and pod row, with no other sign until there are many."""
    jobs = Job.objects.filter(workspace__in=Workspace.objects.values("pk"))

    who = Q(workspace__in=Workspace.objects.values("pk"))
    pods = plans_of(lambda: gpu_use(who, FIRST, LAST, LATER), only="pod_unrolled_covering")
    assert reads(pods, "pod_unrolled_covering") and "Index Cond: (COALESCE(finished_at, 'infinity'" in pods, pods
    rolled = plans_of(lambda: gpu_use(who, FIRST, LAST, LATER), only="gpu_day_use_covering")
    assert reads(rolled, "gpu_day_use_covering"), rolled
    running = plans_of(lambda: queue_times(jobs, START, END), only="job_running_covering")
    assert reads(running, "job_running_covering") and "Index Cond: ((running_at >=" in running, running
    # The scope's side as the sums join it.
    scope = plans_of(lambda: list(jobs.order_by().values("pk", "quota", "user")), only="job_workspace_covering")
    assert reads(scope, "job_workspace_covering"), scope
