"""Latency of the API under concurrent official-SDK clients, over many stored jobs, served by gunicorn
as the Procfile runs it.

    python bench/api_latency.py [--jobs 100000] [--clients 8] [--calls 100] [--workers 2]
    DATABASE_URL=postgres://... SECRET_KEY=... python bench/api_latency.py      # PostgreSQL

Steps: a fresh database of the run's own (bench/harness.py), the demo cluster, then `--jobs` stored
jobs (one role and one pod each, over the last 30 days, in both workspaces, of alice and bob); the
Procfile's `web` line (gunicorn, its workers and threads) on a free port; then `--clients` processes,
each with its own SDK client (alice's AccessKey), call one action `--calls` times at once, action after
action: CreateJob, GetJob, ListJobs (a page of 50, no filter), ListJobs filtered (Status and
a DisplayName search) and the floor (GetJob of a job that does not exist: signing, HTTP, signature
check, key lookup and nonce insert, without the action's own work). The times include the clients'
own signing and HTTP. It prints p50 / p99 per action beside the targets and the reference loop.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shlex
import socket
import subprocess
import sys
import time
from datetime import timedelta

try:
    from bench import harness
except ImportError:  # run as a script
    import harness

ACTIONS = ("CreateJob", "GetJob", "ListJobs", "ListJobs, filtered", "404 floor")
TARGET_P99_MS = {"CreateJob": 100, "GetJob": 50, "ListJobs": 50, "ListJobs, filtered": 50}
BATCH = 5_000
ACTION_TIMEOUT_S = 60  # and a second a call: a client that hangs fails the run, naming the action
CREATE = {
    "DisplayName": "bench-create", "JobType": "PyTorchJob", "UserCommand": "python train.py",
    "JobSpecs": [{"Type": "Worker", "Image": "pytorch:2", "PodCount": 2, "EcsSpec": "ecs.g7.xlarge"}],
}


# ---- the stored jobs ---------------------------------------------------------------------------

def store_jobs(count: int, seed: int = 7) -> list[str]:
    """Bulk-create `count` finished or waiting jobs with a role and a pod each; their ids."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from jobs.models import Job, JobSpec, Pod
    from jobs.states import JobStatus
    from quotas.models import ResourceSpec, Workspace

    users = list(get_user_model().objects.filter(username__in=("alice", "bob")).order_by("username"))
    workspaces = list(Workspace.objects.filter(name__in=("ml-research", "vision-lab")).order_by("name"))
    spec = ResourceSpec.objects.get(instance_type="ecs.g7.xlarge")
    statuses = [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.RUNNING]
    now, rng, ids = timezone.now(), random.Random(seed), []
    for first in range(0, count, BATCH):
        with transaction.atomic():
            jobs = Job.objects.bulk_create(
                Job(job_id=f"dlcapi{i:08d}", workspace=rng.choice(workspaces), user=rng.choice(users),
                    display_name=f"bench-{i}", user_command="python train.py", status=rng.choice(statuses),
                    created_at=now - timedelta(minutes=rng.randrange(30 * 24 * 60)))
                for i in range(first, min(first + BATCH, count)))
            JobSpec.objects.bulk_create(JobSpec(job=j, spec=spec, image="pytorch:2") for j in jobs)
            Pod.objects.bulk_create(Pod(pod_id=f"{j.job_id}-worker-0", job=j, role="Worker", index=0) for j in jobs)
        ids += [j.job_id for j in jobs]
    return ids


def alice_key() -> tuple[str, str]:
    """An AccessKey of alice, a member of both workspaces: (id, secret)."""
    from django.contrib.auth import get_user_model

    from apikit.models import AccessKey

    key, secret = AccessKey.issue(get_user_model().objects.get(username="alice"))
    return key.access_key_id, secret


# ---- the clients -------------------------------------------------------------------------------

def _client(endpoint: str, key: tuple[str, str]):
    from alibabacloud_pai_dlc20201203.client import Client
    from alibabacloud_tea_openapi.models import Config

    return Client(Config(access_key_id=key[0], access_key_secret=key[1], endpoint=endpoint, protocol="http"))


def _call(client, action: str, job_ids: list[str], rng: random.Random) -> None:
    from alibabacloud_pai_dlc20201203 import models as dlc
    from alibabacloud_tea_openapi.exceptions import ClientException

    if action == "CreateJob":
        client.create_job(dlc.CreateJobRequest().from_map(CREATE))
    elif action == "GetJob":
        client.get_job(rng.choice(job_ids), dlc.GetJobRequest())
    elif action == "ListJobs":
        found = client.list_jobs(dlc.ListJobsRequest(page_size=50, page_number=1)).body
        assert len(found.jobs) == min(50, found.total_count), found.total_count
    elif action == "ListJobs, filtered":
        client.list_jobs(dlc.ListJobsRequest(page_size=50, page_number=1, status="Succeeded",
                                             display_name=f"bench-{rng.randrange(100)}"))
    else:
        try:
            client.get_job("dlc-does-not-exist", dlc.GetJobRequest())
        except ClientException as exc:
            assert exc.code == "EntityNotExist.Job", exc.code
        else:
            raise AssertionError("GetJob of a job that does not exist answered")


def _one_client(args) -> list[float]:
    """One client process: `calls` calls of `action`, each timed in ms."""
    endpoint, key, action, job_ids, calls, seed = args
    client, rng = _client(endpoint, key), random.Random(seed)
    _call(client, "404 floor", job_ids, rng)  # a connection and a key lookup before the timed calls
    times = []
    for _ in range(calls):
        begin = time.perf_counter()
        _call(client, action, job_ids, rng)
        times.append((time.perf_counter() - begin) * 1000)
    return times


def run(endpoint: str, key: tuple[str, str], job_ids: list[str], clients: int, calls: int) -> dict:
    """Each action in turn, called by `clients` processes at once; its times and the throughput."""
    found = {}
    # spawn: a forked child inherits whatever lock the parent held at the fork, and a suite run
    # once hung here for minutes with no request outstanding (each SDK call times out in 10 s).
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        for action in ACTIONS:
            started = time.perf_counter()
            pending = pool.map_async(_one_client, [(endpoint, key, action, job_ids, calls, 11 + c)
                                                   for c in range(clients)])
            try:
                per_client = pending.get(timeout=ACTION_TIMEOUT_S + calls)
            except multiprocessing.TimeoutError:
                raise SystemExit(f"{action}: {clients} clients did not finish {calls} calls each within "
                                 f"{ACTION_TIMEOUT_S + calls} s") from None
            wall = time.perf_counter() - started
            ms = sorted(t for times in per_client for t in times)
            found[action] = {"calls": len(ms), "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
                             "per_s": len(ms) / wall}
    return {"clients": clients, "actions": found}


def percentile(sorted_ms: list[float], p: int) -> float:
    """Nearest rank: the ceil(p * n / 100)-th value."""
    return sorted_ms[max(0, -(-p * len(sorted_ms) // 100) - 1)]


def report(r: dict) -> str:
    lines = [f"{r.get('stored', 0):,} stored jobs on {r.get('backend', '?')}, {r['clients']} concurrent SDK clients, "
             f"{r.get('server', 'the test server')}"]
    for action, t in r["actions"].items():
        target = TARGET_P99_MS.get(action)
        mark = "" if target is None else f"   target p99 <= {target} ms" + ("" if t["p99_ms"] <= target else ", over")
        lines.append(f"  {action:<20} {t['calls']:5d} calls  p50 {t['p50_ms']:7.1f} ms  p99 {t['p99_ms']:7.1f} ms  "
                     f"{t['per_s']:6.1f}/s{mark}")
    return "\n".join(lines)


# ---- gunicorn as the Procfile runs it ------------------------------------------------------------

def procfile_web(port: int) -> list[str]:
    """The Procfile's web command on `port`, without its supervisor and its access log."""
    line = next(l for l in (harness.REPO / "Procfile").read_text().splitlines() if l.startswith("web:"))
    words = shlex.split(line.removeprefix("web:").replace("${OPENDLC_PORT:-8000}", str(port)))
    words = words[words.index("gunicorn"):]
    if "--access-logfile" in words:
        at = words.index("--access-logfile")
        del words[at:at + 2]
    return [sys.executable, "-m", *words]


def start_server(port: int) -> subprocess.Popen:
    command = procfile_web(port)
    server = subprocess.Popen(command, cwd=harness.REPO, env={**os.environ, "LOG_LEVEL": "ERROR"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit(f"gunicorn did not start within 60 s: {' '.join(command)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--calls", type=int, default=100, help="calls of each action by each client")
    args = parser.parse_args()
    var = harness.configure("api_latency")
    from django.db import connection

    from console import demo

    before = harness.reference_loop_s()
    demo.seed(price_history=False)
    job_ids = store_jobs(args.jobs)
    harness.vacuum_analyze()
    key = alice_key()
    connection.close()
    port = harness.free_port()
    server = start_server(port)
    try:
        r = run(f"127.0.0.1:{port}", key, job_ids, args.clients, args.calls)
    finally:
        server.terminate()
        server.wait(timeout=10)
    r.update(stored=args.jobs, backend=connection.vendor, server=" ".join(procfile_web(port)[2:]))
    print(report(r))
    print(harness.speed(before))
    harness.cleanup(var)


if __name__ == "__main__":
    main()
