"""The events of jobs as the platform moves them: pod reports (one batch), AIMaster's restarts after
a failure, a preemption or a spot release, and a preempted job without fault tolerance."""

import pytest

from jobs import dispatch
from jobs.models import Job
from notify import services
from notify.models import Delivery
from quotas.models import Workspace
from tests.aimaster.conftest import running  # noqa: F401  (fixture)
from tests.aimaster.test_restarts import current_pods, fail_pod, preempt, refreshed
from tests.jobs.conftest import cycle, cycle_requests, report, reports, sent  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

EVERY_EVENT = ["Running", "Succeeded", "Failed", "Preempted", "Restarted", "SpotReleased"]


@pytest.fixture
def subscribed(alice, demo_cluster, eager_celery):
    research = Workspace.objects.get(name="ml-research")
    services.create_subscription(alice, research, channel="email", target="ops@example.com", chosen=EVERY_EVENT)


def told() -> list[str]:
    return list(Delivery.objects.order_by("id").values_list("event", flat=True))


def test_a_job_that_runs_and_succeeds_through_pod_reports_is_told_twice(subscribed, running, reports,  # noqa: F811
                                                                         mailoutbox):
    job = running(pods=2)
    reports(*(report(p, "Succeeded", 0) for p in current_pods(job)))
    assert told() == ["Running", "Succeeded"] and len(mailoutbox) == 2


def test_a_restart_after_a_failure_is_restarted(subscribed, running, reports):  # noqa: F811
    job = running(pods=1)
    fail_pod(reports, current_pods(job)[0], 137)
    assert refreshed(job).restart_count == 1 and told() == ["Running", "Restarted"]


def test_a_preemption_restart_is_preempted(subscribed, running, reports):  # noqa: F811
    job = running(pods=1)
    preempt(reports, current_pods(job)[0])
    assert told() == ["Running", "Preempted"]
    assert '"events":["Preempted","Restarted"]' in Delivery.objects.get(event="Preempted").body


def test_a_spot_release_is_spot_released(subscribed, running, reports):  # noqa: F811
    job = running(pods=1)
    Job.objects.filter(pk=job.pk).update(source="spot")
    preempt(reports, current_pods(job)[0], reason=dispatch.SPOT_RELEASED)
    assert told() == ["Running", "SpotReleased"]


def test_a_preempted_job_without_fault_tolerance_is_preempted_and_failed(subscribed, running, reports):  # noqa: F811
    job = running(pods=1, ft_enabled=False)
    preempt(reports, current_pods(job)[0])
    assert refreshed(job).status == "Failed" and told() == ["Running", "Preempted"]
    assert '"events":["Preempted","Failed"]' in Delivery.objects.get(event="Preempted").body
