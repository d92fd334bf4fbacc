"""Benchmark: chaos. Services are killed while jobs run; every job must still end, and no GPU may
ever be held by two pods at once.

Run by hand:  python bench/chaos.py [--jobs 300] [--nodes 16] [--every 8] [--visibility 10]
(with DATABASE_URL and REDIS_URL for PostgreSQL + Redis; see bench/harness.py for the database.
With REDIS_URL the bench runs a Redis server of its own on a free port, with the append-only file
docker-compose.yml gives Redis, and restarts it as one of the faults; the URL's server is not used.)

--nodes simulated nodes of 8 GPUs in one quota; --jobs jobs of 1, 2, 4 or 8 GPUs running 2 to 6 s
(seeded), with fault tolerance on (AIMaster restarts a job whose pod was lost, up to 10 times).
Beat runs as in production (every schedule cycle, lost-node reaping). One fault every --every
seconds, round-robin, while jobs remain; each killed service is started again at once, as
deploy/respawn.py and docker-compose's restart policy do:
    scheduler worker   SIGKILL: the cycle it ran, the messages it had taken
    platform worker    SIGKILL: pod reports and heartbeats in hand
    simulated agent    SIGKILL: every pod it ran vanishes with it
    beat               SIGKILL
    broker             a Redis restart (standalone, with REDIS_URL) or every client connection cut
Printed: jobs submitted, finished, stuck (not ended --timeout s after the last fault), GPUs
double-booked (sampled all along); and per fault, how long until the database next recorded a pod
start (the whole chain works again) and the AIMaster restarts it caused, with how long they took to
run again.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    from bench import harness
except ImportError:  # run as a script
    import harness

NODE_GPUS = 8
SIZES = (1, 1, 2, 2, 4, 8)  # GPUs a job asks for, drawn uniformly: mostly small jobs, some whole nodes


class OverlapWatch(threading.Thread):
    """Samples the pods holding each node's GPUs while the faults happen: a GPU held twice is a bug."""

    def __init__(self, every_s: float = 0.1):
        super().__init__(daemon=True)
        self.every_s = every_s
        self.done = threading.Event()
        self.samples = 0
        self.overlaps: list[tuple] = []

    def run(self) -> None:
        from django.db import close_old_connections

        from jobs.models import Pod

        try:
            while not self.done.is_set():
                held = {}
                for pod_id, node, gpus in Pod.objects.holding().values_list("pod_id", "node__name", "gpu_indices"):
                    for gpu in gpus or ():
                        other = held.setdefault((node, gpu), pod_id)
                        if other != pod_id:
                            self.overlaps.append((node, gpu, other, pod_id))
                self.samples += 1
                self.done.wait(self.every_s)
        finally:
            close_old_connections()

    def stop(self) -> None:
        self.done.set()
        self.join(10)


class RedisServer:
    """A Redis server of the bench's own, so that restarting it disturbs nobody else."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="opendlc-chaos-redis-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--dir", str(self.dir), "--appendonly", "yes", "--save", ""],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def restart(self) -> None:
        """SIGTERM (Redis writes its append-only file and exits, as `docker restart` does), then start."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.start()

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def cut_broker_connections() -> None:
    """What the services see of a Redis restart without restarting a server others use: every
    connection to this run's Redis database drops at once."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    me = client.client_id()
    for c in client.client_list():
        if int(c["db"]) == db and int(c["id"]) != me:
            client.client_kill_filter(_id=c["id"])
    client.close()


@dataclass
class Fault:
    name: str
    at: float  # time.monotonic() of the kill
    at_wall: object  # the same moment, timezone-aware, to compare with the database's times
    recovered_s: float | None = None  # until the database next recorded a pod start
    restarts: list[float] = field(default_factory=list)  # seconds each restart it caused took to run again


def beat(services: harness.Services) -> None:
    services._spawn("beat", [sys.executable, "-m", "celery", "-A", "console", "beat", "-l", "WARNING",
                             "-s", str(services.var / "celerybeat-schedule")])


def restart(services: harness.Services, key: str) -> None:
    """SIGKILL a service, then start it again as its supervisor would."""
    proc = services.processes.pop(key)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if key == "beat":
        beat(services)
    elif key == "simagent":
        services._spawn("simagent", [sys.executable, "manage.py", "agent", "--simulated", "--concurrency", "2",
                                     "--loglevel", "WARNING"], agent="simulated")
    else:
        services._worker(key, {"scheduler": "scheduler", "platform": "default"}[key], 1 if key == "scheduler" else 2,
                         loglevel="INFO" if key == "scheduler" else "WARNING")


def run(services: harness.Services, *, jobs: int = 300, nodes: int = 16, every_s: float = 8.0, seed: int = 7,
        broker=None, visibility_s: int = 10, timeout_s: float = 300) -> dict:
    """broker: a callable that makes the broker fault (None: no broker fault, as with the embedded broker)."""
    from django.utils import timezone

    from jobs.cycle_requests import request_cycle
    from jobs.models import Job, Pod, RestartRecord
    from jobs.states import FINAL

    rng = random.Random(seed)
    team = harness.make_team("chaos")
    spec = harness.make_spec("sim.8gpu", NODE_GPUS)
    quota = harness.make_quota(team, "chaos")
    harness.make_nodes(quota, spec, nodes, "chaos")
    pks = []
    for _ in range(jobs):
        pks += harness.submit_quietly(team, quota, spec, 1, duration_s=round(rng.uniform(2, 6), 1),
                                      gpus=rng.choice(SIZES), name="chaos")
    ours = Job.objects.filter(pk__in=pks)
    ours.update(ft_enabled=True, ft_max_restarts=10)

    # Production's loops, faster: lost nodes found in seconds, a taken message back in `visibility_s`,
    # a lost start sent again after 5 s.
    services.env.update({"OPENDLC_SCHEDULE_INTERVAL_S": "2", "OPENDLC_NODE_LOST_AFTER_S": "6",
                         "OPENDLC_START_RESEND_AFTER_S": "5", "OPENDLC_BROKER_VISIBILITY_TIMEOUT_S": str(visibility_s)})
    services.start(heartbeat_s=1)
    beat(services)
    watch = OverlapWatch()
    watch.start()
    request_cycle()

    kinds = ["scheduler", "platform", "simagent", "beat"] + (["broker"] if broker else [])
    faults: list[Fault] = []
    started = Pod.objects.filter(job__in=pks, started_at__isnull=False)
    t0 = time.monotonic()
    next_fault = t0 + every_s
    seen_starts = started.count()
    try:
        while ours.exclude(status__in=FINAL).exists():
            now = time.monotonic()
            starts = started.count()
            if starts > seen_starts:
                for fault in faults:
                    if fault.recovered_s is None:
                        fault.recovered_s = now - fault.at
            seen_starts = starts
            if now >= next_fault and seen_starts and all(f.recovered_s is not None for f in faults):
                kind = kinds[len(faults) % len(kinds)]
                faults.append(Fault(kind, time.monotonic(), timezone.now()))
                broker() if kind == "broker" else restart(services, kind)
                next_fault = time.monotonic() + every_s
            last = faults[-1].at if faults else t0
            if now - last > timeout_s:
                break
            for key, proc in services.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{key} exited with {proc.returncode}\n{services.logs()}")
            time.sleep(0.1)
    finally:
        watch.stop()
    wall_s = time.monotonic() - t0

    for i, fault in enumerate(faults):
        until = faults[i + 1].at_wall if i + 1 < len(faults) else None
        records = RestartRecord.objects.filter(job__in=pks, at__gte=fault.at_wall)
        if until is not None:
            records = records.filter(at__lt=until)
        fault.restarts = [r.duration_s for r in records.filter(running_again_at__isnull=False)]
    statuses = list(ours.values_list("status", flat=True))
    return {"jobs": jobs, "nodes": nodes, "gpus": nodes * NODE_GPUS, "wall_s": wall_s,
            "succeeded": statuses.count("Succeeded"), "finished": sum(s in FINAL for s in statuses),
            "stuck": sum(s not in FINAL for s in statuses), "double_booked": len({o[:2] for o in watch.overlaps}),
            "samples": watch.samples, "faults": faults, "visibility_s": visibility_s,
            "restarted_jobs": ours.filter(restarts__isnull=False).distinct().count()}


def report(r: dict) -> str:
    rows = []
    for f in r["faults"]:
        took = sorted(f.restarts)
        rows.append((f.name, "-" if f.recovered_s is None else f"{f.recovered_s:.1f}", len(took),
                     f"{took[len(took) // 2]:.1f}" if took else "-", f"{took[-1]:.1f}" if took else "-"))
    return (f"{r['jobs']} jobs submitted on {r['nodes']} nodes ({r['gpus']} GPUs): {r['finished']} finished "
            f"({r['succeeded']} Succeeded), {r['stuck']} stuck, {r['double_booked']} GPUs double-booked "
            f"({r['samples']} samples), {r['restarted_jobs']} jobs restarted by AIMaster, in {r['wall_s']:.0f} s; "
            f"broker visibility timeout {r['visibility_s']} s\n" +
            harness.table(rows, ("fault", "next pod start (s)", "restarts", "p50 to run again (s)", "max (s)")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--every", type=float, default=8.0, help="seconds between faults")
    parser.add_argument("--visibility", type=int, default=10, help="the broker's visibility timeout (s)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    server = None
    if os.environ.get("REDIS_URL"):
        if not shutil.which("redis-server"):
            sys.exit("with REDIS_URL this benchmark restarts a Redis server of its own: redis-server is not on PATH")
        server = RedisServer()
        server.start()
        os.environ["REDIS_URL"] = server.url
    try:
        harness.run_standalone("chaos", run, report, jobs=args.jobs, nodes=args.nodes, every_s=args.every,
                               seed=args.seed, visibility_s=args.visibility, broker=server and server.restart)
    finally:
        if server:
            server.close()


if __name__ == "__main__":
    main()
