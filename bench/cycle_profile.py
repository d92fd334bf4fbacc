"""Profile one schedule cycle in-process: --waiting jobs of one pod each waiting for --nodes nodes.

Run by hand:  python bench/cycle_profile.py [--waiting 10000] [--nodes 1000] [--top 25]
              python bench/cycle_profile.py --kueue [pod|gang] [--waiting 10000] [--cycles 20]
(with DATABASE_URL for PostgreSQL; see bench/harness.py for the database).

--kueue: the shape of bench/kueue_baseline.py's backlog instead: its 30 quotas under 5 cohorts, and
--waiting jobs of its classes (in its proportions) spread over the quotas, so that every queue is
deeper than a cycle plans; pod (default): one pod of 1, 5 or 20 GPUs a job on a 20-GPU node a quota,
gang: 1, 5 or 20 one-GPU pods a job on 20 one-GPU nodes a quota (its --shape).

The cycles run with the garbage collector set as a worker sets it at start (console/celery.py);
--python-gc keeps CPython's defaults, to see what that setting saves.

The jobs go in through jobs.services.create_job with cycle requests left out (no services run
here). Then cycles run back to back in this process, each timed by step (snapshot, plan, apply),
all but the first (which reads every job afresh) are profiled with cProfile. Between cycles every
bound pod is reported Succeeded through lifecycle.apply_reports, as the agent would, so each cycle
has free nodes again.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
from unittest import mock

try:
    from bench import harness, kueue_baseline
except ImportError:  # run as a script
    import harness
    import kueue_baseline


class GcClock:
    """Seconds spent in the cyclic garbage collector, and its full collections, since `reset`
    (gc.callbacks)."""

    def __init__(self):
        self.seconds, self.full, self._began = 0.0, 0, 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.full += info["generation"] == 2

    def reset(self) -> None:
        self.seconds, self.full = 0.0, 0


gc_clock = GcClock()


def timed_cycle(now=None) -> dict:
    """One cycle of this process's scheduler (cycle/schedule.py), its start messages not sent."""
    from cycle import tasks as cycle_tasks

    gc_clock.reset()
    with mock.patch("jobs.dispatch.send"):  # no agent here
        decisions = cycle_tasks.process_cycle.run(now)
    steps = cycle_tasks.process_cycle.last_steps
    return {"admitted": len(decisions.admissions), "snapshot": steps["lock"] + steps["snapshot"],
            "plan": steps["plan"], "apply": steps["apply"],
            "commit": steps["commit and send"] + steps["wait reasons"], "total": steps["total"],
            "gc": gc_clock.seconds, "gc2": gc_clock.full}


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


def kueue_backlog(waiting: int, shape: str) -> None:
    """bench/kueue_baseline.py's cluster, and `waiting` of its jobs in its class proportions,
    round-robin over the quotas."""
    cluster = kueue_baseline.build(5, 6, shape)
    total = sum(c.count for c in kueue_baseline.CLASSES)
    with mock.patch("jobs.services.request_cycle"):
        for cls in kueue_baseline.CLASSES:
            for n in range(round(waiting * cls.count / total)):
                kueue_baseline.submit(cluster, n % len(cluster.queues), cls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--profile", default="", help="write the cProfile stats of the cycles after the first here")
    parser.add_argument("--kueue", choices=kueue_baseline.SHAPES, nargs="?", const="pod", default=None,
                        help="the Kueue baseline's quotas and job classes, in this shape (default pod)")
    parser.add_argument("--python-gc", action="store_true",
                        help="keep CPython's garbage collector settings, not the ones a worker sets at start")
    args = parser.parse_args()
    var = harness.configure("cycleprof")
    t = time.perf_counter()
    if args.kueue:
        kueue_backlog(args.waiting, args.kueue)
    else:
        team = harness.make_team("prof")
        spec = harness.make_spec("sim.1gpu", 1)
        quota = harness.make_quota(team, "prof")
        harness.make_nodes(quota, spec, args.nodes, "prof")
        harness.submit_quietly(team, quota, spec, args.waiting, duration_s=0.5, name="admit")
    print(f"submitted {args.waiting} jobs in {time.perf_counter() - t:.1f} s")

    if not args.python_gc:
        from console.celery import _tune_gc

        _tune_gc()  # as the scheduler worker does at start (console/celery.py)
    # The first cycle reads every job afresh; the others are the steady state a busy scheduler
    # lives in (cycle/waiting.py keeps what it read), and those are profiled.
    rows = [timed_cycle()]
    profiler = cProfile.Profile()
    for _ in range(args.cycles - 1):
        reports_s = finish_bound()
        profiler.enable()
        rows.append({**timed_cycle(), "reports": reports_s})
        profiler.disable()
    print(harness.table([(n, r["admitted"], *(f"{r[k]:.3f}" for k in ("snapshot", "plan", "apply", "commit", "total",
                                                                      "gc")),
                          r["gc2"], f"{r['reports']:.3f}" if "reports" in r else "")
                         for n, r in enumerate(rows, 1)],
                        ("cycle", "admitted", "snapshot s", "plan s", "apply s", "commit, reasons s", "total s",
                         "of which in gc s", "full gcs", "reports before it s")))
    steady = rows[1:]
    if steady:
        print(f"cycles after the first: mean {sum(r['total'] for r in steady) / len(steady):.3f} s, of which in gc "
              f"{sum(r['gc'] for r in steady) / len(steady):.3f} s; {sum(r['gc2'] for r in steady)} full collections")
    if args.profile:
        profiler.dump_stats(args.profile)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.top)
    harness.cleanup(var)


if __name__ == "__main__":
    main()
