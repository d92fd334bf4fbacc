"""End to end: an idle job with fault tolerance is preempted by the lender, re-queued, restarted
when the capacity frees, resumes from its EasyCkpt checkpoint and succeeds.

A real platform worker and a real agent run real processes (tests/agent/live.py); selected with
`-m e2e`, and part of the default suite too.
"""

import re
import sys

import pytest

from jobs.logs import read_all
from jobs.models import Job, OversoldType, Pod
from jobs.services import JobRequest, RoleRequest, create_job
from quotas.models import Node
from tests.agent.live import REPO
from tests.agent.test_e2e import live, registered, team  # noqa: F401  (the agent e2e fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

STEPS, CKPT_EVERY = 80, 5
TRAIN = f"{sys.executable} {REPO}/examples/train_easyckpt.py --steps {STEPS} --ckpt-every {CKPT_EVERY} --sleep 0.1"


def submit(team, command, *, quota, oversold=None, **ft):  # noqa: F811
    return create_job(team["alice"], JobRequest(
        display_name="e2e", user_command=command, quota_id=team[quota].quota_id, oversold_type=oversold,
        roles=[RoleRequest(pod_count=1, instance_type="e2e.c1m1g2", image="local")], termination_grace_s=20, **ft,
    ))


def job_row(job) -> Job:
    return Job.objects.get(pk=job.pk)


def steps(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"^step=(\d+) ", text, re.M)]


def test_a_preempted_job_resumes_from_its_last_checkpoint_and_succeeds(live, team):  # noqa: F811
    live.start_platform()
    live.start_agent("e2e-a")
    live.wait(registered("e2e-a"), "the agent to register")
    Node.objects.filter(name="e2e-b").delete()  # one node: the lender's job needs the borrowed one

    borrower = submit(team, TRAIN, quota="b", oversold=OversoldType.ACCEPT, ft_enabled=True)
    first = Pod.objects.get(job=borrower)
    live.wait(lambda: (job_row(borrower).last_checkpoint_step or 0) >= 2 * CKPT_EVERY,
              "the borrower to report its second checkpoint (jobs.pod_progress)", timeout=120)
    assert job_row(borrower).use_oversold_resource is True  # Acceptable, placed on idle capacity

    lender = submit(team, "echo reclaimed; sleep 3", quota="a")  # guaranteed: reclaims its node
    live.wait(lambda: job_row(lender).status == "Succeeded", "the lender's job to run and finish", timeout=120)
    live.wait(lambda: job_row(borrower).status in ("Succeeded", "Failed"), "the borrower to finish", timeout=180)

    borrower = job_row(borrower)
    assert (borrower.status, borrower.restart_count, borrower.preemption_restart_count) == ("Succeeded", 0, 1)
    record = borrower.restarts.get()
    assert (record.cause, record.counted) == ("Preemption", False)
    assert record.running_again_at is not None and record.duration_s > 0

    first.refresh_from_db()
    second = Pod.objects.get(job=borrower, current=True)
    assert (first.status_label, first.current, second.incarnation, second.status) == (
        "Resource Preempted", False, 1, "Succeeded")
    lender_pod = Pod.objects.get(job=lender)
    assert lender_pod.bound_at >= first.finished_at  # the lender ran once the borrower was gone
    assert second.bound_at >= lender_pod.finished_at  # and the borrower again once the lender was done

    before, after = read_all(first), live.wait(lambda: "done at" in read_all(second) and read_all(second), "logs")
    last_before = steps(before)[-1]
    resumed = int(re.search(r"^resumed from step=(\d+)", after, re.M).group(1))
    print(f"last step logged before preemption={last_before}, resumed from step={resumed}, "
          f"first step after={steps(after)[0]}, running again after {record.duration_s:.1f} s")
    assert resumed > 0 and steps(after)[0] == resumed + 1  # continues, does not restart at 0
    assert last_before - resumed <= CKPT_EVERY  # at most one checkpoint interval of work lost
    assert steps(after)[-1] == STEPS and f"done at step={STEPS}" in after
