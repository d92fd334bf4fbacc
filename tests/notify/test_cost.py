"""The hook runs inside every batch of status changes the scheduler and the pod reports write, so its
cost must not grow with the batch: nothing for steps that are no event, one query for the rest."""

import pytest
from django.utils import timezone

from jobs import history
from jobs.models import Job
from jobs.states import JobStatus
from notify import services
from quotas.models import Workspace
from tests.console.conftest import quota_job

pytestmark = pytest.mark.django_db


def batch(alice, n, target):
    for i in range(n):
        quota_job(alice, f"job-{i}")
    now = timezone.now()
    # Loaded as a report batch loads them: without workspace or name (jobs.lifecycle._Batch.JOB_FIELDS).
    jobs = Job.objects.only("job_id", "status", "reason_code", "reason_message", "running_at", "finished_at")
    steps = []
    for job in jobs:
        job.status = JobStatus.ENV_PREPARING if target == JobStatus.RUNNING else job.status
        steps.append(history.transition(job, target, reason="", message="", at=now))
    return steps


def test_steps_that_are_no_event_cost_no_query(alice, django_assert_num_queries):
    steps = batch(alice, 20, JobStatus.ENV_PREPARING)
    with django_assert_num_queries(0):
        services.on_transitions(history.Transition, transitions=steps)


@pytest.mark.parametrize("n", [5, 40])
def test_a_batch_of_events_costs_one_query_without_subscriptions_and_two_with(alice, n, django_assert_num_queries):
    steps = batch(alice, n, JobStatus.RUNNING)
    with django_assert_num_queries(1):
        services.on_transitions(history.Transition, transitions=steps)
    research = Workspace.objects.get(name="ml-research")
    services.create_subscription(alice, research, channel="email", target="ops@example.com", chosen=["Running"])
    with django_assert_num_queries(2):  # the subscriptions joined to the jobs, and one insert of the deliveries
        services.on_transitions(history.Transition, transitions=steps)
