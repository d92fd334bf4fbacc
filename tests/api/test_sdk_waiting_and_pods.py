"""What the SDK says about a job that waits and about a pod that restarted: the scheduler's reason
and queue position (the words the console shows), and one PodId across a pod's incarnations,
each incarnation with its own PodUid."""

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc
from django.utils import timezone
from django.utils.html import escape

from cycle import tasks as cycle_tasks
from jobs import aimaster, dispatch
from jobs.logs import store_chunks
from jobs.models import Job, Pod
from jobs.states import PodStatus
from tests.api.test_sdk_jobs import create, rejected

V100 = "ecs.gn6v-c8g1.16xlarge"  # nlp-team (quota00000002) has two of them


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    """The test runs the schedule cycle itself; nothing goes to Celery or the agents."""
    monkeypatch.setattr("jobs.cycle_requests._request_now", lambda: None)
    monkeypatch.setattr(dispatch, "send", lambda messages: None)


def two_node_job(client, name: str) -> str:
    return create(client, DisplayName=name, ResourceId="quota00000002",
                  JobSpecs=[{"Type": "Worker", "Image": "pytorch:2", "PodCount": 2, "EcsSpec": V100}])


def test_a_waiting_job_says_why_and_where_it_queues_in_get_job_list_jobs_and_the_console(alice_dlc, alice, client):
    two_node_job(alice_dlc, "first")
    second = two_node_job(alice_dlc, "second")
    cycle_tasks.process_cycle.run()
    job = Job.objects.get(job_id=second)
    assert job.status == "Queuing" and job.wait_reason and job.queue_position == 1

    got = alice_dlc.get_job(second, dlc.GetJobRequest()).body
    assert got.reason_message == f"{job.wait_reason} (queue position 1)"
    assert got.reason_code == "WaitingForResources"
    listed = alice_dlc.list_jobs(dlc.ListJobsRequest(job_id=second)).body.jobs[0]
    assert (listed.reason_code, listed.reason_message) == (got.reason_code, got.reason_message)
    client.force_login(alice)
    page = client.get(f"/jobs/{second}/").content.decode()
    assert escape(got.reason_message) in page


def test_a_job_that_no_longer_waits_gives_the_reason_of_its_last_step(alice_dlc):
    job_id = two_node_job(alice_dlc, "only")
    Job.objects.filter(job_id=job_id).update(status="Stopped", reason_code="StoppedByUser",
                                             reason_message="Stopped by alice", wait_reason="stale")
    got = alice_dlc.get_job(job_id, dlc.GetJobRequest()).body
    assert (got.reason_code, got.reason_message) == ("StoppedByUser", "Stopped by alice")


@pytest.fixture
def restarted(alice_dlc):
    """A job whose one pod failed and runs again as a new incarnation, each with its own log."""
    job_id = create(alice_dlc)
    job = Job.objects.get(job_id=job_id)
    first = job.pods.get()
    Pod.objects.filter(pk=first.pk).update(current=False, status=PodStatus.FAILED)
    again = aimaster.next_incarnation(first, job_id=job_id, now=timezone.now())
    again.status = PodStatus.RUNNING
    again.save()
    store_chunks([{"pod_id": first.pod_id, "offset": 0, "text": "first life\n"},
                  {"pod_id": again.pod_id, "offset": 0, "text": "second life\n"}])
    return job_id


def test_a_pod_keeps_its_pod_id_across_restarts_and_each_incarnation_has_its_own_uid(alice_dlc, restarted):
    pod = alice_dlc.get_job(restarted, dlc.GetJobRequest()).body.pods[0]
    earlier = pod.history_pods[0]
    assert pod.pod_id == earlier.pod_id == f"{restarted}-worker-0"
    assert pod.pod_uid != earlier.pod_uid
    item = alice_dlc.list_jobs(dlc.ListJobsRequest(job_id=restarted)).body.jobs[0].pods[0]
    assert (item.pod_id, item.pod_uid) == (pod.pod_id, pod.pod_uid)


def test_pod_logs_and_events_by_pod_id_read_the_current_incarnation_and_by_pod_uid_an_earlier_one(
        alice_dlc, restarted):
    pod = alice_dlc.get_job(restarted, dlc.GetJobRequest()).body.pods[0]
    earlier = pod.history_pods[0]

    current = alice_dlc.get_pod_logs(restarted, pod.pod_id, dlc.GetPodLogsRequest()).body
    assert (current.logs, current.pod_id, current.pod_uid) == (["second life"], pod.pod_id, pod.pod_uid)
    old = alice_dlc.get_pod_logs(restarted, pod.pod_id, dlc.GetPodLogsRequest(pod_uid=earlier.pod_uid)).body
    assert (old.logs, old.pod_id, old.pod_uid) == (["first life"], pod.pod_id, earlier.pod_uid)
    events = alice_dlc.get_pod_events(restarted, pod.pod_id, dlc.GetPodEventsRequest(pod_uid=earlier.pod_uid)).body
    assert (events.pod_id, events.pod_uid) == (pod.pod_id, earlier.pod_uid)


def test_a_pod_uid_of_another_pod_is_not_found(alice_dlc, restarted):
    error = rejected(lambda: alice_dlc.get_pod_logs(restarted, f"{restarted}-worker-0",
                                                    dlc.GetPodLogsRequest(pod_uid="no-such-uid")))
    assert (error.status_code, error.code) == (404, "EntityNotExist.Pod")
