"""The real services for a benchmark: platform Celery workers and the simulated agent, as subprocesses.

Standalone (`python bench/<name>.py`): `configure(name)` gives the run a database of its own before
Django starts — with DATABASE_URL, a PostgreSQL database `<name in the URL>_<name>`, dropped and
migrated afresh (the database the URL names is never touched); without it, a new SQLite file and
filesystem broker under a temporary OPENDLC_VAR_DIR. Under pytest, `Services.for_test` shares the
test's database and broker instead, as tests/agent/live.py does.

The services (`Services.start`):
    scheduler worker   queue 'scheduler'  (schedule cycles; one at a time anyway)
    platform worker    queue 'default'    (pod reports, heartbeats), threads
    simulated agent    queue 'agent.simulated'  (`manage.py agent --simulated`)
No beat: every event requests its own cycle, which is the path being measured.

Jobs go in through `jobs.services.create_job`, the function the API and the console call.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

QUEUES = ("default", "scheduler", "agent.simulated")


# ---- a database of the run's own (standalone runs) ----------------------------------------------


def configure(name: str) -> Path:
    """Point this process (and the services it starts) at a fresh database; set Django up."""
    # `timeout` or ^C: leave through the `with Services` block, which stops the services.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    var = Path(tempfile.mkdtemp(prefix=f"opendlc-{name}-"))
    os.environ["OPENDLC_VAR_DIR"] = str(var)
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret-but-as-long-as-django-asks-0123")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    # A backlog bench keeps more jobs waiting in its one workspace than a team is let to.
    os.environ.setdefault("OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE", "0")
    url = os.environ.get("DATABASE_URL")
    if url:
        os.environ["DATABASE_URL"] = _fresh_postgres(url, name)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return var


def _fresh_postgres(url: str, name: str) -> str:
    import psycopg

    parts = urlsplit(url)
    db = f"{parts.path.lstrip('/') or 'opendlc'}_{name}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db}"')
    return urlunsplit(parts._replace(path=f"/{db}"))


# ---- the services --------------------------------------------------------------------------


class Services:
    """Service subprocesses against one database and broker; tests/agent/live.py builds on it."""

    def __init__(self, var: Path, env: dict[str, str], queues: tuple[str, ...] = QUEUES):
        self.var = var
        from django.conf import settings

        # This process's SECRET_KEY: the services decrypt what it encrypted (the agents' join tokens).
        self.env = {**os.environ, **env, "OPENDLC_VAR_DIR": str(var), "PYTHONUNBUFFERED": "1",
                    "SECRET_KEY": settings.SECRET_KEY}
        self.processes: dict[str, subprocess.Popen] = {}
        _purge(queues)

    @classmethod
    def standalone(cls, var: Path) -> Services:
        return cls(var, {})

    @classmethod
    def for_test(cls, tmp_path: Path, settings) -> Services:
        return cls(*shared_with_test(tmp_path, settings))

    def start(self, *, report_threads: int = 2, heartbeat_s: int = 5) -> None:
        self.env["OPENDLC_HEARTBEAT_INTERVAL_S"] = str(heartbeat_s)
        self._worker("scheduler", "scheduler", 1, loglevel="INFO")  # INFO: each cycle's timings
        self._worker("platform", "default", report_threads)
        self._spawn("simagent", [sys.executable, "manage.py", "agent", "--simulated", "--concurrency", "2",
                                 "--loglevel", "WARNING"], agent="simulated")

    def _worker(self, key: str, queues: str, threads: int, loglevel: str = "WARNING") -> None:
        self._spawn(key, [sys.executable, "-m", "celery", "-A", "console", "worker", "-Q", queues, "-P", "threads",
                          "-c", str(threads), "-n", f"{key}@%h", "--without-gossip", "--without-mingle",
                          "--without-heartbeat", "-l", loglevel])

    def _spawn(self, key: str, args: list[str], agent: str = "") -> subprocess.Popen:
        """Start a service; an agent's (`agent`: its node, or "simulated") with a join token issued now."""
        env = self.env
        if agent:
            from jobs.agents import register

            env = {**env, "OPENDLC_AGENT_TOKEN": register(agent)}
        with open(self.var / f"{key}.log", "ab") as log:
            proc = self.processes[key] = subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                                          stdout=log, stderr=subprocess.STDOUT,
                                                          start_new_session=True)
        return proc

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each service has used so far, threads included (Linux /proc)."""
        used = {key: process_cpu_seconds(proc.pid) for key, proc in self.processes.items()}
        return {key: seconds for key, seconds in used.items() if seconds is not None}

    def cpu_report(self, since: tuple[float, float], children_s: float = 0.0) -> str:
        """One line: CPU seconds per service, the submitters (`children_s`) and the whole machine
        (every process, PostgreSQL and Redis included) since `since` (a machine_cpu_seconds()),
        and the time the hypervisor gave the machine's CPUs to others (steal): runs of one
        benchmark on this shared machine differ most when that is high."""
        parts = [f"{k} {v:.0f}" for k, v in self.cpu_seconds().items()]
        if children_s:
            parts.append(f"submitters {children_s:.0f}")
        busy, steal = (now - then for now, then in zip(machine_cpu_seconds(), since))
        return (f"CPU seconds: {', '.join(parts)}; whole machine {busy:.0f} on {os.cpu_count()} cores, "
                f"stolen by the hypervisor {steal:.0f}")

    def cycle_report(self) -> str:
        """One line: how many schedule cycles that admitted or preempted ran, and how long they took
        (the scheduler's log; cycles that decided nothing log at DEBUG)."""
        took = sorted(float(m.group(1)) for m in re.finditer(r"cycle: .* in ([0-9.]+) s",
                                                                (self.var / "scheduler.log").read_text(errors="replace")))
        if not took:
            return "deciding schedule cycles: none logged"
        def q(p):
            return took[min(len(took) - 1, int(p * len(took)))]
        return (f"deciding schedule cycles: {len(took)}, taking p50 {q(0.5):.3f} s, p90 {q(0.9):.3f} s, max {took[-1]:.3f} s, "
                f"{sum(took):.0f} s in all")

    def close(self) -> None:
        for proc in self.processes.values():
            _signal(proc, signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait()
        self.processes.clear()
        from django.db import connections

        connections.close_all()

    def __enter__(self) -> Services:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def logs(self) -> str:
        return "\n".join(f"==== {p.name}\n{p.read_text(errors='replace')[-6000:]}" for p in sorted(self.var.glob("*.log")))

    def wait(self, condition, what: str, timeout: float = 60, interval: float = 0.05):
        """Poll `condition` until truthy; fail with the services' logs on timeout or a dead service."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            for key, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{key} exited with {proc.returncode} while waiting for {what}\n{self.logs()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}\n{self.logs()}")
            time.sleep(interval)


def process_cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) the process has used so far, threads included; None if it is gone
    or this is not Linux (/proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU time of the whole machine so far (Linux /proc/stat: busy is all but idle,
    iowait and steal; steal is time a virtual machine's CPUs were given to others)."""
    from cycle.pacing import cpu_seconds

    values = cpu_seconds()
    if values is None:
        return 0.0, 0.0
    return sum(values[:7]) - values[3] - values[4], values[7]


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def shared_with_test(tmp_path: Path, settings) -> tuple[Path, dict[str, str]]:
    """A var folder and environment that give subprocesses the pytest database (its test name)
    and broker: PostgreSQL and Redis when set, else links to the SQLite file and broker folder."""
    var = tmp_path / "var"
    var.mkdir()
    settings.VAR_DIR = var  # the schedule-request flag file, in embedded mode
    env = {}
    name = settings.DATABASES["default"]["NAME"]
    if os.environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = urlunsplit(urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{name}"))
    else:
        (var / "opendlc.sqlite3").symlink_to(Path(name).resolve())
    if not settings.REDIS_URL:
        (var / "broker").symlink_to(Path(settings.BROKER_DIR).resolve())
    return var, env


def _purge(queues: tuple[str, ...]) -> None:
    """Messages an earlier run left behind must not reach this run's services."""
    from console.celery import app

    with app.connection_for_write() as conn:
        for queue in queues:
            try:
                conn.default_channel.queue_purge(queue)
            except Exception:  # a queue that never existed
                pass
    from jobs import cycle_requests

    cycle_requests.clear_request()


def free_port() -> int:
    """A TCP port free on this host now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cleanup(var: Path) -> None:
    """Remove the run's folder, or with OPENDLC_BENCH_KEEP=1 keep it (the services' logs) and say where."""
    if os.environ.get("OPENDLC_BENCH_KEEP") == "1":
        print(f"kept the run's folder, with the services' logs: {var}")
        return
    shutil.rmtree(var, ignore_errors=True)


def run_standalone(name: str, run, report, **kwargs) -> None:
    """A benchmark's command line: a database of its own, the services, `run`, its printed report."""
    var = configure(name)
    before = reference_loop_s()
    with Services.standalone(var) as services:
        result = run(services, **kwargs)
    print(report(result))
    print(speed(before))
    cleanup(var)


def run_in_process(name: str, run, report, **kwargs) -> None:
    """The same for a benchmark that needs no services: a database of its own, `run`, its report."""
    var = configure(name)
    before = reference_loop_s()
    print(report(run(**kwargs)))
    print(speed(before))
    cleanup(var)


def vacuum_analyze() -> None:
    """Leave a freshly loaded PostgreSQL database as autovacuum leaves one that has been up a while:
    statistics, and the visibility map that lets a query read a covering index alone. Inside a
    transaction (a benchmark's smoke run in the test suite), where VACUUM cannot run, statistics only."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE")


def speed(before: float) -> str:
    """The line every benchmark ends with: the reference loop before the run (`before`) and now."""
    return (f"this machine's speed: a reference loop of 5,000,000 Python additions took {before:.2f} s before the "
            f"run and {reference_loop_s():.2f} s after it (compare runs only at similar figures)")


def reference_loop_s() -> float:
    """Seconds one core takes for a fixed pure-Python loop: the same machine type ran this code's
    benchmarks up to 2x slower on some days than on others, and slower as a session went on."""
    started, total = time.perf_counter(), 0
    for i in range(5_000_000):
        total += i
    return time.perf_counter() - started


# ---- the cluster ---------------------------------------------------------------------------


@dataclass
class Team:
    user: object
    workspace: object
    tenant: object


def make_team(name: str = "bench") -> Team:
    from django.contrib.auth import get_user_model

    from quotas.models import Membership, Role, Tenant, Workspace

    user = get_user_model().objects.create_user(f"{name}-user", password="x")
    tenant = Tenant.objects.create(name=name)
    workspace = Workspace.objects.create(tenant=tenant, name=f"{name}-ws")
    Membership.objects.create(workspace=workspace, user=user, role=Role.OWNER, is_default=True)
    return Team(user, workspace, tenant)


def make_spec(instance_type: str, gpus: int):
    from quotas.models import ResourceSpec

    return ResourceSpec.objects.create(instance_type=instance_type, cpu=max(1, gpus) * 8,
                                       memory_mib=max(1, gpus) * 65536, gpu=gpus, gpu_type="sim",
                                       on_demand_price_per_minute=Decimal("0"))


def make_quota(team: Team, quota_id: str, parent=None, *, priority_preemption: bool = False):
    from quotas.models import Quota

    quota = Quota.objects.create(quota_id=quota_id, name=quota_id, tenant=team.tenant, parent=parent,
                                 allow_priority_preemption=priority_preemption)
    quota.workspaces.add(team.workspace)
    return quota


def make_nodes(quota, spec, count: int, prefix: str) -> list[str]:
    from quotas.models import Executor, Node

    names = [f"{prefix}-{i:04d}" for i in range(count)]
    Node.objects.bulk_create(Node(name=n, spec=spec, quota=quota, executor=Executor.SIMULATED) for n in names)
    return names


def submit(team: Team, quota, spec, *, duration_s: float, pods: int = 1, priority: int = 1,
           oversold: str | None = None, grace_s: int = 30, stop_s: float = 0.0, name: str = "bench",
           restart_on_preemption: bool = False, gpus: int | None = None):
    """One job through jobs.services.create_job (validation, rows, Queuing, a cycle request).

    gpus: the pods give their own resources (this many GPUs, with 8 vCPU and 64 GiB a GPU), not `spec`'s."""
    from jobs.services import JobRequest, PodResources, RoleRequest, create_job

    envs = {"SIM_DURATION_S": str(duration_s), "SIM_STOP_S": str(stop_s)}
    return create_job(team.user, JobRequest(
        display_name=name, user_command="simulated", quota_id=quota.quota_id, oversold_type=oversold,
        priority=priority, envs=envs, termination_grace_s=grace_s,
        # A preempted job is re-queued and runs again, as a preempted Kueue workload does.
        ft_enabled=restart_on_preemption, ft_max_restarts=0 if restart_on_preemption else 3,
        roles=[RoleRequest(pod_count=pods, instance_type=spec.instance_type, image="sim") if gpus is None else
               RoleRequest(pod_count=pods, image="sim", resources=PodResources(gpus, 8 * gpus, 65536 * gpus))],
    ))


def submit_quietly(team: Team, quota, spec, count: int, **kwargs) -> list[int]:
    """`count` jobs through create_job with no cycle requested for each: a bulk submission before the
    services start (the caller requests the one cycle it wants). Returns their pks."""
    from unittest import mock

    with mock.patch("jobs.services.request_cycle"):
        return [submit(team, quota, spec, **kwargs).pk for _ in range(count)]


def warm_up(services: Services, team: Team, quota, spec) -> None:
    """One tiny job through every service: the workers and the agent are up and connected."""
    from jobs.models import Job

    job = submit(team, quota, spec, duration_s=0, name="warm-up")
    services.wait(lambda: Job.objects.filter(pk=job.pk, status="Succeeded").exists(), "the warm-up job",
                  timeout=120, interval=0.1)


# ---- figures -------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return ordered[int(rank) - 1]


def table(rows: list[tuple], header: tuple) -> str:
    cells = [tuple(str(c) for c in header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
