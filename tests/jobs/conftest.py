"""Fixtures for the jobs tests: nothing leaves the process (agent messages and cycle requests are
recorded, not sent), and small builders for requests and pod reports."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from bench import harness
from cycle import tasks as cycle_tasks
from jobs import dispatch
from jobs.services import JobRequest, RoleRequest

NLP = "quota00000002"  # nlp-team: 2 nodes of 8 V100, bound to ml-research (alice owner, bob member)
CV = "quota00000003"  # cv-team: 2 nodes of 8 V100, bound to vision-lab (alice owner)
V100 = "ecs.gn6v-c8g1.16xlarge"
T0 = timezone.now().replace(microsecond=0) + timedelta(hours=1)  # after every submission


@pytest.fixture(autouse=True)
def sent(monkeypatch):
    """The messages the platform would have sent to the agents, in order."""
    messages = []
    monkeypatch.setattr(dispatch, "send", lambda batch: messages.extend(batch))
    return messages


@pytest.fixture(autouse=True)
def cycle_requests(monkeypatch):
    """How many times a schedule cycle was requested (after commit)."""
    calls = []
    monkeypatch.setattr("jobs.cycle_requests._request_now", lambda: calls.append(1))
    return calls


def make_request(pods=1, instance_type=V100, role="Worker", **kw) -> JobRequest:
    roles = kw.pop("roles") if "roles" in kw else [RoleRequest(role=role, pod_count=pods, instance_type=instance_type,
                                                  image="pytorch:2.5")]
    base = JobRequest(display_name="train", user_command="python train.py", roles=roles, quota_id=NLP)
    return replace(base, **kw)


def report(pod, status, exit_code=None, at=None, reason="", message="") -> dict:
    return {"pod_id": pod.pod_id, "status": status, "exit_code": exit_code,
            "at": at.isoformat() if at else None, "reason": reason, "message": message}


@pytest.fixture
def cycle(django_capture_on_commit_callbacks):
    """run_cycle as if its transaction committed: its after-commit messages reach `sent`."""

    def run(now=None):
        with django_capture_on_commit_callbacks(execute=True):
            return cycle_tasks.process_cycle.run(now)
    return run


@pytest.fixture
def reports(django_capture_on_commit_callbacks):
    """Apply pod reports as the jobs.pod_reports task would, after-commit effects included."""
    from jobs.lifecycle import apply_reports

    def apply(*items, now=None):
        with django_capture_on_commit_callbacks(execute=True):
            return apply_reports(list(items), now)
    return apply


@pytest.fixture
def cluster(db):
    """A quota of 80 one-GPU simulated nodes (bench/harness.py): (team, quota, spec)."""
    team = harness.make_team("batch")
    spec = harness.make_spec("sim.1gpu", 1)
    quota = harness.make_quota(team, "batch")
    harness.make_nodes(quota, spec, 80, "batch")
    return team, quota, spec


def bound_jobs(cluster, cycle, shapes: list[int], **submit) -> list:
    """One job of `cluster` per shape (its pod count), all bound by one cycle at T0 - 1 minute;
    `submit`: more arguments of harness.submit."""
    team, quota, spec = cluster
    jobs = [harness.submit(team, quota, spec, duration_s=1, pods=n, **submit) for n in shapes]
    cycle(T0 - timedelta(minutes=1))
    for job in jobs:
        job.refresh_from_db()
        assert job.status == "EnvPreparing"
    return jobs
