"""Profile one schedule cycle in-process: --waiting jobs of one pod each waiting for --nodes nodes.

Run by hand:  python bench/cycle_profile.py [--waiting 10000] [--nodes 1000] [--top 25]
(with DATABASE_URL for PostgreSQL; see bench/harness.py for the database).

The jobs go in through jobs.services.create_job with cycle requests left out (no services run
here). Then cycles run back to back in this process, each timed by step (snapshot, plan, apply),
and the first is profiled with cProfile. Between cycles every bound pod is reported Succeeded
through lifecycle.apply_reports, as the agent would, so each cycle has free nodes again.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from unittest import mock

try:
    from bench import harness
except ImportError:  # run as a script
    import harness


def timed_cycle(now=None) -> dict:
    from django.db import transaction
    from django.utils import timezone

    import scheduler as s
    from jobs import scheduling

    now = now or timezone.now()
    t = [time.perf_counter()]
    with transaction.atomic():
        scheduling._serialize_cycles()
        snapshot = scheduling.build_snapshot(now)
        t.append(time.perf_counter())
        decisions = s.plan(snapshot, now)
        t.append(time.perf_counter())
        scheduling.apply(decisions, now)  # messages are not sent: no agent here
        t.append(time.perf_counter())
    t.append(time.perf_counter())
    return {"admitted": len(decisions.admissions), "snapshot": t[1] - t[0], "plan": t[2] - t[1],
            "apply": t[3] - t[2], "commit": t[4] - t[3], "total": t[4] - t[0]}


def finish_bound(now=None) -> float:
    """Report every running-or-bound pod Succeeded, as the agent would; returns the seconds taken."""
    from django.utils import timezone

    from jobs import lifecycle
    from jobs.models import Pod

    now = now or timezone.now()
    ids = list(Pod.objects.filter(node__isnull=False, status="Pending").values_list("pod_id", flat=True))
    t = time.perf_counter()
    with mock.patch("jobs.lifecycle.request_cycle"):
        lifecycle.apply_reports([{"pod_id": i, "status": "Running", "at": now.isoformat()} for i in ids], now)
        lifecycle.apply_reports([{"pod_id": i, "status": "Succeeded", "exit_code": 0, "at": now.isoformat()}
                                 for i in ids], now)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--profile", default="", help="write the first cycle's cProfile stats here")
    args = parser.parse_args()
    var = harness.configure("cycleprof")
    team = harness.make_team("prof")
    spec = harness.make_spec("sim.1gpu", 1)
    quota = harness.make_quota(team, "prof")
    harness.make_nodes(quota, spec, args.nodes, "prof")
    t = time.perf_counter()
    harness.submit_quietly(team, quota, spec, args.waiting, duration_s=0.5, name="admit")
    print(f"submitted {args.waiting} jobs in {time.perf_counter() - t:.1f} s")

    profiler = cProfile.Profile()
    profiler.enable()
    first = timed_cycle()
    profiler.disable()
    rows = [first]
    for _ in range(args.cycles - 1):
        reports_s = finish_bound()
        rows.append({**timed_cycle(), "reports": reports_s})
    print(harness.table([(n, r["admitted"], *(f"{r[k]:.3f}" for k in ("snapshot", "plan", "apply", "commit", "total")),
                          f"{r['reports']:.3f}" if "reports" in r else "")
                         for n, r in enumerate(rows, 1)],
                        ("cycle", "admitted", "snapshot s", "plan s", "apply s", "commit s", "total s",
                         "reports before it s")))
    if args.profile:
        profiler.dump_stats(args.profile)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.top)
    harness.cleanup(var)


if __name__ == "__main__":
    main()
