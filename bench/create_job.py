"""Benchmark: what one job submission costs, in process: jobs.services.create_job, the function the
API, the console and bench/kueue_baseline.py's submitters call.

Run by hand:  python bench/create_job.py [--jobs 2000]
(with DATABASE_URL for PostgreSQL; see bench/harness.py for the database).

The Kueue baseline's jobs (one pod of 1, 5 or 20 GPUs on a quota of its 30, Acceptable, fault
tolerance on), submitted one after another after 100 to warm up. No services run; each job's cycle
request goes to Redis (with REDIS_URL) or the flag file as it would. Printed per job: the wall
time, this process's CPU time, and PostgreSQL's (the CPU time of this connection's server process,
read from /proc: PostgreSQL on this machine only). The Kueue baseline submits 250 jobs a second,
so every millisecond here is a quarter of a core there.
"""

from __future__ import annotations

import argparse
import time

try:
    from bench import harness, kueue_baseline
except ImportError:  # run as a script
    import harness
    import kueue_baseline

WARM_UP = 100


def run(jobs: int = 2000, warm_up: int = WARM_UP, cohorts: int = 5, queues: int = 6) -> dict:
    cluster = kueue_baseline.build(cohorts, queues)
    submit = [(n % len(cluster.queues), kueue_baseline.CLASSES[n % len(kueue_baseline.CLASSES)])
              for n in range(warm_up + jobs)]
    for queue, cls in submit[:warm_up]:
        kueue_baseline.submit(cluster, queue, cls)
    server0, wall0, cpu0 = server_cpu_seconds(), time.perf_counter(), time.process_time()
    for queue, cls in submit[warm_up:]:
        kueue_baseline.submit(cluster, queue, cls)
    wall, cpu, server = time.perf_counter() - wall0, time.process_time() - cpu0, server_cpu_seconds()
    return {"jobs": jobs, "wall_ms": wall / jobs * 1000, "cpu_ms": cpu / jobs * 1000,
            "server_ms": (server - server0) / jobs * 1000 if server is not None and server0 is not None else None}


def server_cpu_seconds() -> float | None:
    """CPU seconds of this connection's PostgreSQL server process so far; None elsewhere."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return harness.process_cpu_seconds(cursor.fetchone()[0])  # None: PostgreSQL on another machine


def report(r: dict) -> str:
    server = f"{r['server_ms']:.2f} ms" if r["server_ms"] is not None else "not measured (not PostgreSQL here)"
    return (f"create_job, {r['jobs']} Kueue-baseline jobs one after another: wall {r['wall_ms']:.2f} ms a job, "
            f"this process's CPU {r['cpu_ms']:.2f} ms, PostgreSQL's CPU {server}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args()
    var = harness.configure("createjob")
    print(report(run(args.jobs)))
    harness.cleanup(var)


if __name__ == "__main__":
    main()
