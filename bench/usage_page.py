"""Time of the Usage page (/usage/) over many stored jobs, on SQLite or PostgreSQL.

    python bench/usage_page.py [--jobs 100000] [--repeat 5]
    DATABASE_URL=postgres://... SECRET_KEY=... python bench/usage_page.py

Steps: a fresh database of the run's own (bench/harness.configure), the demo cluster, then `--jobs`
finished and running jobs bulk-created over the last 30 days across its workspaces, quotas, users
and sources (guaranteed, idle, spot, public), with one or two pods each, some of them preempted, and
a daily bill for each spot and pay-as-you-go job; the finished pods are rolled up by day. Then the
page is fetched through Django's test client (the whole request: middleware, the queries, the
Plotly figures, the template) as staff (every
workspace of the tenant) and as a plain member, over the default 7 days and over 30 days, and the
median and fastest of `--repeat` fetches are printed, with the machine's reference loop.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import run_in_process, vacuum_analyze  # noqa: E402

BATCH = 5_000
SOURCES = (  # (source, pod kind, quota name or None, weight)
    ("quota", "guaranteed", "nlp-team", 35), ("quota", "guaranteed", "cv-team", 20),
    ("quota", "guaranteed", "llm-pretrain", 10), ("quota", "idle", "nlp-team", 15),
    ("spot", "spot", None, 12), ("public", "payg", None, 8),
)


def populate(jobs: int, seed: int = 7, pods_per_job: tuple[int, ...] = (1, 1, 2)) -> int:
    """Bulk-create `jobs` jobs with their pods (a number drawn from `pods_per_job` each) and bills;
    returns the number of pods."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from jobs.models import Job, Pod
    from jobs.states import JobStatus, PodStatus, PodSubStatus
    from quotas.models import Quota, ResourceSpec, Workspace
    from spot.models import DailyBill

    rng, now = random.Random(seed), timezone.now()
    users = list(get_user_model().objects.filter(username__in=("alice", "bob")))
    workspaces = list(Workspace.objects.filter(name__in=("ml-research", "vision-lab")))
    quotas = {q.name: q for q in Quota.objects.all()}
    spec = ResourceSpec.objects.get(instance_type="ecs.gn7i-c8g1.2xlarge")
    pods_made = 0
    for first in range(0, jobs, BATCH):
        with transaction.atomic():
            made, kinds, pods, bills = [], [], [], []
            for i in range(first, min(first + BATCH, jobs)):
                source, kind, quota, _ = rng.choices(SOURCES, weights=[s[3] for s in SOURCES])[0]
                submitted = now - timedelta(minutes=rng.randrange(30 * 24 * 60))
                running = submitted + timedelta(seconds=rng.randrange(5, 3600))
                finished = running + timedelta(minutes=rng.randrange(5, 600))
                done = finished < now
                kinds.append(kind)
                made.append(Job(job_id=f"dlcusage{i:07d}", workspace=rng.choice(workspaces), user=rng.choice(users),
                                display_name=f"usage-{i}", user_command="python train.py", source=source,
                                quota=quotas[quota] if quota else None, created_at=submitted, submitted_at=submitted,
                                running_at=running if running < now else None,
                                finished_at=finished if done else None,
                                status=JobStatus.SUCCEEDED if done else JobStatus.RUNNING))
            Job.objects.bulk_create(made)
            for job, kind in zip(made, kinds):
                evicted = kind in ("idle", "spot") and rng.random() < 0.1
                for index in range(rng.choice(pods_per_job)):
                    pods.append(Pod(
                        pod_id=f"{job.job_id}-worker-{index}", job=job, role="Worker", index=index, kind=kind,
                        gpu=rng.choice((1, 2, 4, 8)), started_at=job.running_at, finished_at=job.finished_at,
                        status=(PodStatus.FAILED if evicted else PodStatus.SUCCEEDED) if job.finished_at else
                        PodStatus.RUNNING, sub_status=PodSubStatus.EVICTED if evicted else PodSubStatus.NORMAL,
                        reason_code=("Preempted" if kind == "idle" else "SpotReleased") if evicted else ""))
                if job.source in ("spot", "public") and job.finished_at:
                    minutes = int((job.finished_at - job.running_at).total_seconds() // 60) + 1
                    on_demand = spec.on_demand_price_per_minute * minutes
                    paid = on_demand * Decimal("0.4") if job.source == "spot" else on_demand
                    bills.append(DailyBill.of(job, spec=spec, day=job.running_at.date(), minutes=minutes,
                                              pay_type="spot" if job.source == "spot" else "postpaid",
                                              amount=paid, on_demand_amount=on_demand))
            Pod.objects.bulk_create(pods)
            DailyBill.objects.bulk_create(bills)
            pods_made += len(pods)
    return pods_made


def time_page(username: str, query: str, repeat: int) -> dict:
    """Seconds per fetch of /usage/ for the user: median and fastest of `repeat`, after one warm-up."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    seconds = []
    for _ in range(repeat + 1):
        started = time.perf_counter()
        response = client.get(f"/usage/{query}")
        seconds.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
    return {"median_s": statistics.median(seconds[1:]), "min_s": min(seconds[1:]), "bytes": len(response.content)}


def run(jobs: int, repeat: int) -> dict:
    from django.db import connection
    from django.utils import timezone

    from console import demo
    from jobs.usage_history import roll_up

    demo.seed(price_history=False)
    started = time.perf_counter()
    pods = populate(jobs)
    roll_up()  # the finished pods, as the beat task rolls them up each minute
    loaded_s = time.perf_counter() - started
    vacuum_analyze()
    today = timezone.now().date()
    month = f"?from={today - timedelta(days=29)}&to={today}"
    timings = {f"{who} {label}": time_page(who, query, repeat)
               for who in ("alice", "bob") for label, query in (("7 days", ""), ("30 days", month))}
    return {"backend": connection.vendor, "jobs": jobs, "pods": pods, "load_s": loaded_s, "timings": timings}


def report(r: dict) -> str:
    lines = [f"/usage/ on {r['backend']} with {r['jobs']:,} jobs "
             f"({r['pods']:,} pods; bulk-created in {r['load_s']:.1f} s)"]
    for label, t in r["timings"].items():
        lines.append(f"  {label:<14} median {1000 * t['median_s']:7.1f} ms   fastest {1000 * t['min_s']:7.1f} ms   "
                     f"({t['bytes'] / 1024:.0f} KiB)")
    lines.append("  alice: staff, every workspace of the tenant; bob: a member of ml-research")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    run_in_process("usage_page", run, report, jobs=args.jobs, repeat=args.repeat)

if __name__ == "__main__":
    main()
