"""CreateJob when the broker is down, and its idempotency key (issue #27, item 7): a committed job is
answered as created, and a client's retry with the same x-acs-client-token gets the same JobId, never
a second job, while the token is the caller's own: another user, or another tenant, who sends the
same one gets a job of their own."""

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc
from alibabacloud_tea_openapi.exceptions import ClientException
from alibabacloud_tea_util.models import RuntimeOptions
from kombu.exceptions import OperationalError

from jobs import cycle_requests
from jobs.models import Job
from tests.api.conftest import dlc_client, key_of

BODY = {"DisplayName": "train", "JobType": "PyTorchJob", "UserCommand": "python train.py",
        "JobSpecs": [{"Type": "Worker", "Image": "pytorch:2", "PodCount": 1, "EcsSpec": "ecs.g7.xlarge"}]}


def create(client, token=None, **fields):
    headers = {"x-acs-client-token": token} if token else {}
    request = dlc.CreateJobRequest().from_map({**BODY, **fields})
    return client.create_job_with_options(request, headers, RuntimeOptions()).body.job_id


@pytest.fixture
def broker_down(monkeypatch, settings, tmp_path):
    settings.REDIS_URL, settings.VAR_DIR = None, tmp_path  # the request flag in a file of this test's own
    sent = []

    def refuse(name, **options):
        sent.append(name)
        raise OperationalError("Error 111 connecting to redis:6379. Connection refused.")

    monkeypatch.setattr(cycle_requests.current_app, "send_task", refuse)
    return sent


def test_a_job_created_while_the_broker_is_down_is_answered_as_created(alice_dlc, broker_down, research):
    job_id = create(alice_dlc)

    assert Job.objects.get(job_id=job_id).status == "Queuing"  # beat's next cycle schedules it
    assert broker_down == ["cycle.schedule"]
    create(alice_dlc)  # the failed request left no flag behind: the next one tries to send again
    assert broker_down == ["cycle.schedule"] * 2


def test_a_retry_with_the_same_client_token_gets_the_same_job(alice_dlc, research):
    first = create(alice_dlc, token="4b7c0e1e-retry")
    again = create(alice_dlc, token="4b7c0e1e-retry")
    other = create(alice_dlc, token="4b7c0e1e-other")

    assert again == first and other != first
    assert Job.objects.count() == 2


def test_a_retry_after_the_broker_failed_gets_the_job_that_was_created(alice_dlc, broker_down, research):
    assert create(alice_dlc, token="t-1") == create(alice_dlc, token="t-1")
    assert Job.objects.count() == 1


def test_a_client_token_is_scoped_to_its_user_and_workspace(endpoint, alice_dlc, bob_dlc, mallory, research,
                                                            vision):
    """bob (alice's colleague) and mallory (another tenant) send alice's token: each gets a job of
    their own, and nothing tells them that alice used it."""
    mallory_dlc = dlc_client(endpoint, *key_of(mallory))
    alices = create(alice_dlc, token="shared-token", WorkspaceId=str(research.pk))

    bobs = create(bob_dlc, token="shared-token", WorkspaceId=str(research.pk))
    mallorys = create(mallory_dlc, token="shared-token")
    in_vision = create(alice_dlc, token="shared-token", WorkspaceId=str(vision.pk))

    assert len({alices, bobs, mallorys, in_vision}) == 4
    assert Job.objects.get(job_id=mallorys).user == mallory
    assert Job.objects.get(job_id=bobs).user.username == "bob"


def test_a_malformed_client_token_is_refused_by_name(alice_dlc, research):
    with pytest.raises(ClientException) as info:
        create(alice_dlc, token="t" * 65)
    assert info.value.code == "InvalidParameter" and "x-acs-client-token" in info.value.message
    assert not Job.objects.exists()
