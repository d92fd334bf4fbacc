"""Latency of CreateJob and GetJob through the official SDK against gunicorn on PostgreSQL.

    DATABASE_URL=postgres://... REDIS_URL=redis://... SECRET_KEY=... python bench/api_latency.py [--calls 300]

Steps: migrate and seed the demo cluster if needed; top the database up to 10,000 stored jobs
(each with one role and one pod, spread over the last five days); start gunicorn in a subprocess;
then time sequential SDK calls (signature check, nonce insert, the action itself, the answer)
and print p50 / p99 / mean per action. The figures include the client's own signing and HTTP.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from alibabacloud_tea_openapi.exceptions import ClientException

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

STORED_JOBS = 10_000


def setup_database():
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from console import demo

    if not demo.is_seeded():
        demo.seed()


def top_up_jobs(target: int) -> int:
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from jobs.models import Job, JobSpec, Pod
    from jobs.states import JobStatus
    from quotas.models import ResourceSpec, Workspace

    missing = target - Job.objects.count()
    if missing <= 0:
        return Job.objects.count()
    alice = get_user_model().objects.get(username="alice")
    workspaces = list(Workspace.objects.all())
    spec = ResourceSpec.objects.get(instance_type="ecs.g7.xlarge")
    now, rng = timezone.now(), random.Random(7)
    statuses = [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.QUEUING]
    start = Job.objects.count()
    with transaction.atomic():
        jobs = Job.objects.bulk_create(
            Job(job_id=f"dlcbench{start + i:07d}", workspace=rng.choice(workspaces), user=alice,
                display_name=f"bench-{start + i}", user_command="python train.py", status=rng.choice(statuses),
                created_at=now - timedelta(minutes=rng.randrange(5 * 24 * 60)))
            for i in range(missing)
        )
        JobSpec.objects.bulk_create(JobSpec(job=j, spec=spec, image="pytorch:2") for j in jobs)
        Pod.objects.bulk_create(Pod(pod_id=f"{j.job_id}-worker-0", job=j, role="Worker", index=0) for j in jobs)
    return Job.objects.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, workers: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "console.wsgi:application", "-b", f"127.0.0.1:{port}",
         "-w", str(workers), "--log-level", "warning"],
        cwd=ROOT, env={**os.environ, "LOG_LEVEL": "ERROR"},  # not a warning line per 404
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit("gunicorn did not start within 30 s")


def timed(calls: int, fn) -> list[float]:
    out = []
    for i in range(calls):
        begin = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - begin) * 1000)
    return out


def report(name: str, ms: list[float]) -> None:
    ms = sorted(ms)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    print(f"{name:10s} calls={len(ms):4d}  p50={p(0.50):7.2f} ms  p99={p(0.99):7.2f} ms  mean={statistics.mean(ms):7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise SystemExit("set DATABASE_URL to a PostgreSQL database (and REDIS_URL, SECRET_KEY)")

    setup_database()
    total = top_up_jobs(STORED_JOBS)
    from alibabacloud_pai_dlc20201203 import models as dlc
    from alibabacloud_pai_dlc20201203.client import Client
    from alibabacloud_tea_openapi.models import Config
    from django.contrib.auth import get_user_model

    from api.jobs import visible_jobs
    from apikit.models import AccessKey

    alice = get_user_model().objects.get(username="alice")
    key, secret = AccessKey.issue(alice)
    readable = list(visible_jobs(alice).values_list("job_id", flat=True)[:5000])
    port = free_port()
    server = start_server(port, args.workers)
    try:
        client = Client(Config(access_key_id=key.access_key_id, access_key_secret=secret,
                               endpoint=f"127.0.0.1:{port}", protocol="http"))
        request = {
            "DisplayName": "bench-create", "JobType": "PyTorchJob", "UserCommand": "python train.py",
            "JobSpecs": [{"Type": "Worker", "Image": "pytorch:2", "PodCount": 2, "EcsSpec": "ecs.g7.xlarge"}],
        }
        client.get_job(readable[0], dlc.GetJobRequest())  # warm up both workers' connections
        client.get_job(readable[1], dlc.GetJobRequest())
        rng = random.Random(11)
        create = timed(args.calls, lambda i: client.create_job(dlc.CreateJobRequest().from_map(request)))
        get = timed(args.calls, lambda i: client.get_job(rng.choice(readable), dlc.GetJobRequest()))
        floor = timed(args.calls, lambda i: missing_job(client, dlc))
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"stored jobs: {total} (+{args.calls} created), gunicorn workers: {args.workers}, sequential calls")
    report("CreateJob", create)
    report("GetJob", get)
    report("404 floor", floor)
    print("(404 floor: GetJob of a job that does not exist — client signing, HTTP, signature check,\n"
          " key lookup and nonce insert, without the action's own work)")


def missing_job(client, dlc) -> None:
    try:
        client.get_job("dlc-does-not-exist", dlc.GetJobRequest())
    except ClientException as exc:
        assert exc.code == "EntityNotExist.Job", exc.code


if __name__ == "__main__":
    main()
