"""Benchmark: sustained admissions per second through the real path (cycle + apply + dispatch).

Run by hand:  python bench/admission_throughput.py [--jobs 10000] [--nodes 1000]
(with DATABASE_URL and REDIS_URL for PostgreSQL + Redis; see bench/harness.py for the database).

A quota owns --nodes simulated nodes of 1 GPU; --jobs single-pod jobs (a pod takes a whole node)
running --duration seconds are submitted through jobs.services.create_job before the services start
(without a cycle request each), and wait; then the services start and one cycle is requested. The clock starts when the first cycle's bindings are seen (committed). Each node runs jobs one after another, so
with more jobs than nodes the figure is sustained: every freed node goes through the agent's
report, the platform's report handling, a cycle request, a cycle and the start message before the
next job runs on it. From that moment to the last job bound (committed) is the admission time; to
the last job finished, the time to done. Slurm documents 500 simple batch
jobs/s sustained; the target is at least that. Printed: jobs/s to bound and to running, the cycles
it took and their mean time.
"""

from __future__ import annotations

import argparse
import time

try:
    from bench import harness
except ImportError:  # run as a script
    import harness



def run(services: harness.Services, *, jobs: int = 10_000, nodes: int = 1_000, duration_s: float = 0.5,
        timeout_s: float = 600) -> dict:
    from jobs.models import Job, Pod

    team = harness.make_team("admit")
    spec = harness.make_spec("sim.1gpu", 1)
    quota = harness.make_quota(team, "admit")
    harness.make_nodes(quota, spec, nodes, "admit")
    t = time.monotonic()
    pks = harness.submit_quietly(team, quota, spec, jobs, duration_s=duration_s, name="admit")
    submit_s = time.monotonic() - t

    cpu0 = harness.machine_cpu_seconds()  # from the services' start, as their own CPU times
    services.start()
    from jobs import cycle_requests

    cycle_requests.request_cycle()  # the one cycle the bulk submission asks for; the scheduler takes it as it starts
    # The run's jobs, by pk range (bulk-created in one go): polled every 20 ms, an IN list of
    # 10,000 pks cost PostgreSQL more than the cycles did.
    pods = Pod.objects.filter(job__id__range=(min(pks), max(pks)))
    services.wait(lambda: pods.filter(node__isnull=False).exists(), "the first cycle", timeout=120, interval=0.01)
    t0 = time.monotonic()
    services.wait(lambda: not pods.filter(node__isnull=True).exists(), f"all {jobs} jobs bound", timeout=timeout_s,
                  interval=0.02)
    bound_s = time.monotonic() - t0
    services.wait(lambda: not pods.exclude(status="Succeeded").exists(), f"all {jobs} jobs done",
                  timeout=timeout_s, interval=0.05)
    running_s = time.monotonic() - t0
    cycles = pods.values("bound_at").distinct().count()
    print(f"first cycle seen {t0 - t:.1f} s after the submissions began")
    return {"jobs": jobs, "nodes": nodes, "submit_per_s": jobs / submit_s, "bound_s": bound_s,
            "admit_per_s": jobs / bound_s, "running_s": running_s, "running_per_s": jobs / running_s,
            "cycles": cycles, "cycle_s": bound_s / cycles,
            "succeeded": Job.objects.filter(pk__in=pks, status="Succeeded").count(),
            "cpu": services.cpu_report(cpu0)}


def report(r: dict) -> str:
    rows = [
        ("admissions, first cycle to all bound (jobs/s)", f"{r['admit_per_s']:.0f}", ">= 500 (Slurm)"),
        ("to all jobs done (jobs/s)", f"{r['running_per_s']:.0f}", ""),
        ("cycles / mean time between them (s)", f"{r['cycles']} / {r['cycle_s']:.2f}", ""),
        ("submissions through create_job (jobs/s)", f"{r['submit_per_s']:.0f}", ""),
    ]
    return (harness.table(rows, ("figure", "OpenDLC", "target")) +
            f"\n{r['jobs']} jobs on {r['nodes']} nodes: all bound in {r['bound_s']:.2f} s, "
            f"done in {r['running_s']:.2f} s; {r['succeeded']} succeeded\n{r['cpu']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--duration", type=float, default=0.5, help="run time of each job (s)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    harness.run_standalone("admit", run, report, jobs=args.jobs, nodes=args.nodes, duration_s=args.duration, timeout_s=args.timeout)


if __name__ == "__main__":
    main()
