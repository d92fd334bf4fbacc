"""E-mail, the second channel: through Django's e-mail backend (locmem in tests)."""

import pytest

from jobs.states import JobStatus
from notify import services
from notify.models import Delivery, DeliveryStatus
from quotas.models import Workspace
from tests.notify.conftest import move, run

pytestmark = pytest.mark.django_db


def test_a_failed_job_is_mailed_to_the_subscribed_address(alice, job, mailoutbox, eager_celery,
                                                          django_capture_on_commit_callbacks):
    research = Workspace.objects.get(name="ml-research")
    _, secret = services.create_subscription(alice, research, channel="email", target="ops@example.com",
                                             chosen=["Failed"])
    with django_capture_on_commit_callbacks(execute=True):
        run(job)
        move(job, JobStatus.FAILED, reason="PodFailed")
    (mail,) = mailoutbox
    assert mail.to == ["ops@example.com"] and job.job_id in mail.subject and "Failed" in mail.subject
    assert "PodFailed" in mail.body and secret == ""
    assert Delivery.objects.get().status == DeliveryStatus.SUCCEEDED


def test_a_bad_address_is_refused_by_field(alice, demo_cluster):
    research = Workspace.objects.get(name="ml-research")
    with pytest.raises(services.NotifyRefused) as refused:
        services.create_subscription(alice, research, channel="email", target="not-an-address", chosen=["Failed"])
    assert list(refused.value.errors) == ["email"]
