"""What one estimate of the waiting jobs' starts costs (cycle/estimate.py), in-process.

Run by hand:  python bench/start_estimate.py [--waiting 1000] [--quotas 4] [--nodes 25] [--repeat 3]
(with DATABASE_URL for PostgreSQL; see bench/harness.py for the database).

Two clusters: the demo (console/demo.py, its jobs admitted and Running, three more nlp-team jobs
waiting behind them), then --quotas quotas of --nodes 8-GPU nodes each under one root, every node
running a one-node job (a third with a maximum running time), --waiting one-node jobs spread over
the quotas, and 2,000 finished jobs of the last week for the quotas' typical runs. Each estimate is
timed whole and split into reading (snapshot, history) and the forward run (cycles of plan()).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta
from unittest import mock

try:
    from bench import harness
except ImportError:  # run as a script
    import harness


def timed_estimates(repeat: int) -> dict:
    from django.utils import timezone

    from cycle import estimate
    from tracesim import forward

    runs, forward_s, forecasts = [], [], []

    def timed_forward(*args, **kwargs):
        started = time.perf_counter()
        result = original(*args, **kwargs)
        forward_s.append(time.perf_counter() - started)
        forecasts.append(result)
        return result

    original = forward.estimate_starts
    with mock.patch.object(estimate, "estimate_starts", timed_forward):
        for _ in range(repeat):
            started = time.perf_counter()
            found = estimate.estimates(timezone.now())
            runs.append(time.perf_counter() - started)
    return {"jobs": len(found), "not within": sum(e.start is None for e in found.values()),
            "cycles": forecasts[-1].cycles, "total": statistics.median(runs), "forward": statistics.median(forward_s)}


def mark_running(minutes_limit=lambda i: None) -> int:
    """Every admitted job Running since a while ago; returns how many."""
    from django.utils import timezone

    from jobs.models import Job
    from jobs.states import JobStatus

    now = timezone.now()
    admitted = list(Job.objects.filter(status=JobStatus.ENV_PREPARING).order_by("pk").values_list("pk", flat=True))
    for i, pk in enumerate(admitted):
        Job.objects.filter(pk=pk).update(status=JobStatus.RUNNING, running_at=now - timedelta(minutes=i % 50),
                                         max_running_time_minutes=minutes_limit(i))
    return len(admitted)


def demo(repeat: int) -> dict:
    from console import demo as seed
    from cycle import tasks as cycle_tasks
    from jobs.services import JobRequest, RoleRequest, create_job
    from quotas.models import Quota

    seed.seed(price_history=False)
    with mock.patch("jobs.services.request_cycle"), mock.patch("jobs.dispatch.send"):
        seed.seed_jobs()
        cycle_tasks.process_cycle.run()
        mark_running()
        from django.contrib.auth import get_user_model
        alice = get_user_model().objects.get(username="alice")
        nlp = Quota.objects.get(name="nlp-team")
        for i in range(3):
            create_job(alice, JobRequest(f"waiting-{i}", "python train.py",
                                         [RoleRequest("Worker", 1, "ecs.gn6v-c8g1.16xlarge", "pytorch:2")],
                                         workspace_id=alice.memberships.first().workspace_id, quota_id=nlp.quota_id))
        cycle_tasks.process_cycle.run()
    return timed_estimates(repeat)


def large(waiting: int, quotas: int, nodes: int, repeat: int) -> dict:
    from django.utils import timezone

    from cycle import tasks as cycle_tasks
    from jobs.models import Job
    from jobs.states import JobStatus

    team = harness.make_team("estimate")
    spec = harness.make_spec("sim.8gpu", 8)
    root = harness.make_quota(team, "root")
    leaves = [harness.make_quota(team, f"team-{q}", root) for q in range(quotas)]
    for q, quota in enumerate(leaves):
        harness.make_nodes(quota, spec, nodes, f"team-{q}")
        harness.submit_quietly(team, quota, spec, nodes, duration_s=3600)
    with mock.patch("jobs.dispatch.send"):
        cycle_tasks.process_cycle.run()
    running = mark_running(lambda i: 30 + i % 120 if i % 3 == 0 else None)
    for i in range(waiting):
        harness.submit_quietly(team, leaves[i % quotas], spec, 1, duration_s=3600, priority=1 + i % 3)
    now = timezone.now()
    history = Job.objects.filter(status=JobStatus.QUEUING).order_by("pk")[:1]
    template = history[0]
    Job.objects.bulk_create(
        Job(job_id=f"dlcdone{i:06d}", workspace=template.workspace, user=template.user, display_name="done",
            user_command="x", quota=leaves[i % quotas], status=JobStatus.SUCCEEDED,
            running_at=now - timedelta(days=i % 7, minutes=20 + i % 200), finished_at=now - timedelta(days=i % 7))
        for i in range(2000))
    with mock.patch("jobs.dispatch.send"):
        cycle_tasks.process_cycle.run()  # the waiting jobs' positions, as a live cycle leaves them
    return {"running": running, **timed_estimates(repeat)}


def report(name: str, result: dict) -> str:
    return (f"{name}: {result['jobs']} waiting jobs estimated ({result['not within']} not within the horizon), "
            f"{result['cycles']} forward cycles; one estimate {result['total']:.3f} s, of which the forward run "
            f"{result['forward']:.3f} s" + (f" ({result['running']} running jobs)" if "running" in result else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--quotas", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=25)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    var = harness.configure("estimate")
    print(report("demo", demo(args.repeat)))
    print(report("large", large(args.waiting, args.quotas, args.nodes, args.repeat)))
    print(f"this machine's speed: a reference loop took {harness.reference_loop_s():.2f} s")
    harness.cleanup(var)


if __name__ == "__main__":
    main()
