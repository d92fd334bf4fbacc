"""Server time of the console's busiest pages over a workspace of many jobs, on SQLite or PostgreSQL.

    python bench/console_pages.py [--jobs 100000] [--repeat 20]
    DATABASE_URL=postgres://... SECRET_KEY=... python bench/console_pages.py

Steps: a fresh database of the run's own, the demo cluster, then `--jobs` jobs with three pods each
on average (bench/usage_page.populate: 100,000 jobs, about 300,000 pods, over the last 30 days),
and the finished pods rolled up by day as the beat task would have (jobs.usage_history.roll_up).
Each page is fetched through Django's test client (middleware, queries, template: the server's
whole work, without the network) `--repeat` times after a warm-up, as staff (alice, every workspace)
and as a plain member (bob): the jobs list (first page, and filtered by status), a job's detail,
the quota tree and the Usage page. It prints each page's median and p95 with the reference loop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import run_in_process, vacuum_analyze  # noqa: E402
from bench.usage_page import populate  # noqa: E402

TARGET_P95_S = 0.150


def pages() -> dict[str, str]:
    from jobs.models import Job

    # A job with the most pods of the busiest workspace: the detail page's worst case among these.
    job = Job.objects.filter(workspace__name="ml-research").order_by("-created_at").first()
    return {"jobs list": "/jobs/", "jobs list, Running": "/jobs/?status=Running",
            "job detail": f"/jobs/{job.job_id}/", "quota tree": "/quotas/", "usage, 7 days": "/usage/"}


def time_pages(username: str, repeat: int) -> dict[str, dict]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    found = {}
    for label, path in pages().items():
        seconds = []
        for _ in range(repeat + 1):
            started = time.perf_counter()
            response = client.get(path)
            seconds.append(time.perf_counter() - started)
            assert response.status_code == 200, (path, response.status_code)
        seconds = sorted(seconds[1:])
        found[label] = {"median_s": statistics.median(seconds),
                        "p95_s": seconds[min(len(seconds) - 1, round(0.95 * len(seconds)) - 1)]}
    return found


def run(jobs: int, repeat: int) -> dict:
    from django.db import connection

    from console import demo
    from jobs.usage_history import roll_up

    demo.seed(price_history=False)
    started = time.perf_counter()
    pods = populate(jobs, pods_per_job=(1, 2, 3, 4, 5))
    loaded_s = time.perf_counter() - started
    started = time.perf_counter()
    rolled = roll_up()  # what the beat task does each minute, here all at once for the bulk-created pods
    rolled_s = time.perf_counter() - started
    vacuum_analyze()
    return {"backend": connection.vendor, "jobs": jobs, "pods": pods, "load_s": loaded_s, "rolled": rolled,
            "rolled_s": rolled_s,
            "timings": {who: time_pages(who, repeat) for who in ("alice", "bob")}}


def report(r: dict) -> str:
    lines = [f"console pages on {r['backend']} with {r['jobs']:,} jobs ({r['pods']:,} pods; bulk-created in "
             f"{r['load_s']:.1f} s, {r['rolled']:,} finished ones rolled up in {r['rolled_s']:.1f} s); "
             f"target p95 <= {1000 * TARGET_P95_S:.0f} ms"]
    for who, timings in r["timings"].items():
        for label, t in timings.items():
            mark = "" if t["p95_s"] <= TARGET_P95_S else "   over target"
            lines.append(f"  {who:<6} {label:<20} median {1000 * t['median_s']:7.1f} ms   "
                         f"p95 {1000 * t['p95_s']:7.1f} ms{mark}")
    lines.append("  alice: staff, every workspace of the tenant; bob: a member of ml-research")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    run_in_process("console_pages", run, report, jobs=args.jobs, repeat=args.repeat)

if __name__ == "__main__":
    main()
