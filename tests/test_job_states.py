import itertools

import pytest

from jobs import history
from jobs.models import Job, StatusTransition
from jobs.states import FINAL, TRANSITIONS, IllegalTransition, JobStatus, check_transition
from quotas.models import Workspace

ALL = list(JobStatus)
LEGAL = [(a, b) for a in ALL for b in sorted(TRANSITIONS[a])]
ILLEGAL = [(a, b) for a, b in itertools.product(ALL, ALL) if b not in TRANSITIONS[a]]


def test_the_machine_knows_every_status():
    assert set(TRANSITIONS) == set(JobStatus)
    assert FINAL == {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}


@pytest.mark.parametrize(("current", "target"), LEGAL)
def test_it_allows_the_legal_transition(current, target):
    check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), ILLEGAL)
def test_it_rejects_the_illegal_transition(current, target):
    with pytest.raises(IllegalTransition) as err:
        check_transition(current, target)
    assert f"cannot become {target}" in str(err.value)


def test_a_spot_job_bids_before_it_prepares():
    check_transition(JobStatus.CREATING, JobStatus.BIDDING)
    check_transition(JobStatus.BIDDING, JobStatus.ENV_PREPARING)


def test_a_running_job_cannot_skip_stopping_to_stopped():
    with pytest.raises(IllegalTransition, match="allowed: .*Stopping"):
        check_transition(JobStatus.RUNNING, JobStatus.STOPPED)


def test_a_transition_is_recorded_in_history_and_events(alice):
    job = Job.objects.create(
        job_id="dlc-test1", workspace=Workspace.objects.get(name="ml-research"), user=alice,
        display_name="t", user_command="true",
    )
    history.change_status(job, JobStatus.QUEUING, reason="JobQueued")
    history.change_status(job, JobStatus.ENV_PREPARING)
    history.change_status(job, JobStatus.RUNNING)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.running_at is not None
    recorded = list(StatusTransition.objects.filter(job=job).values_list("previous", "status"))
    assert recorded == [("Creating", "Queuing"), ("Queuing", "EnvPreparing"), ("EnvPreparing", "Running")]
    assert job.events.filter(reason="JobQueued").exists()


def test_an_illegal_transition_changes_nothing_stored(alice):
    job = Job.objects.create(
        job_id="dlc-test2", workspace=Workspace.objects.get(name="ml-research"), user=alice,
        display_name="t", user_command="true", status=JobStatus.SUCCEEDED,
    )
    with pytest.raises(IllegalTransition):
        history.change_status(job, JobStatus.RUNNING)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert not job.status_history.exists()
