"""A live cluster for end-to-end tests: a real platform Celery worker and real node agents.

They run as subprocesses against the same broker and the same test database as the test:
  - embedded mode: the filesystem broker and SQLite; the subprocesses get their own OPENDLC_VAR_DIR
    in which `opendlc.sqlite3` and `broker` are links to the test's database file and broker folder;
  - DATABASE_URL/REDIS_URL set: PostgreSQL (the test database pytest-django created) and Redis.
The test process shares the schedule-request flag (settings.VAR_DIR or Redis) and the pod root.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.db import connection

from agent import procs
from agent.process import NODE_MARKER
from jobs import scheduling

REPO = Path(__file__).resolve().parents[2]
PLATFORM_QUEUES = ("default", "scheduler")


class LiveCluster:
    def __init__(self, tmp_path: Path, settings, *, heartbeat_s: int = 1, node_lost_after_s: int = 3):
        self.var = tmp_path / "var"
        self.var.mkdir()
        self.pod_root = self.var / "pods"
        self.processes: dict[str, subprocess.Popen] = {}
        self.nodes: list[str] = []
        # The test process requests schedule cycles and builds start messages like the platform does.
        settings.VAR_DIR = self.var
        settings.OPENDLC_POD_ROOT = self.pod_root
        settings.OPENDLC_NODE_LOST_AFTER_S = node_lost_after_s
        self.env = {
            **os.environ, "OPENDLC_VAR_DIR": str(self.var), "OPENDLC_POD_ROOT": str(self.pod_root),
            "OPENDLC_HEARTBEAT_INTERVAL_S": str(heartbeat_s), "OPENDLC_NODE_LOST_AFTER_S": str(node_lost_after_s),
            "SECRET_KEY": os.environ.get("SECRET_KEY", "e2e"), "PYTHONUNBUFFERED": "1",
        }
        self._share_database_and_broker(settings)
        self._purge(settings)

    def _share_database_and_broker(self, settings) -> None:
        name = settings.DATABASES["default"]["NAME"]
        if os.environ.get("DATABASE_URL"):
            parts = urlsplit(os.environ["DATABASE_URL"])
            self.env["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
        else:
            (self.var / "opendlc.sqlite3").symlink_to(Path(name).resolve())
        if not settings.REDIS_URL:
            (self.var / "broker").symlink_to(Path(settings.BROKER_DIR).resolve())

    def _purge(self, settings) -> None:
        """Messages an earlier run left behind must not reach this run's worker and agents."""
        from console.celery import app

        with app.connection_for_write() as conn:
            channel = conn.default_channel
            for queue in (*PLATFORM_QUEUES, "agent.e2e-a", "agent.e2e-b"):
                try:
                    channel.queue_purge(queue)
                except Exception:  # a queue that never existed
                    pass
        scheduling.clear_request()

    # -- processes -----------------------------------------------------------------------------

    def _spawn(self, key: str, args: list[str]) -> subprocess.Popen:
        log = open(self.var / f"{key}.log", "ab")
        proc = subprocess.Popen(args, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.processes[key] = proc
        return proc

    def start_platform(self) -> None:
        self._spawn("platform", [
            sys.executable, "-m", "celery", "-A", "console", "worker", "-Q", ",".join(PLATFORM_QUEUES),
            "-P", "threads", "-c", "2", "-n", "e2e-platform@%h", "--without-gossip", "--without-mingle",
            "--without-heartbeat", "-l", "INFO",
        ])

    def start_agent(self, node: str) -> subprocess.Popen:
        if node not in self.nodes:
            self.nodes.append(node)
        return self._spawn(f"agent-{node}", [sys.executable, "manage.py", "agent", "--node", node, "--concurrency", "2"])

    def kill(self, key: str) -> None:
        proc = self.processes.pop(key)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        for proc in self.processes.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.processes.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # The pods the agents started (agents leave them running on purpose).
        for node in self.nodes:
            for pgid in procs.groups_with_env(NODE_MARKER, node):
                procs.signal_group(pgid, signal.SIGKILL)
        connection.close()

    def logs(self) -> str:
        return "\n".join(f"==== {p.name}\n{p.read_text(errors='replace')[-6000:]}" for p in sorted(self.var.glob("*.log")))

    # -- waiting -------------------------------------------------------------------------------

    def wait(self, condition, what: str, timeout: float = 60):
        """Poll `condition` every 0.1 s until it is truthy; fail with the processes' logs otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            for key, proc in self.processes.items():
                if proc.poll() is not None:
                    raise AssertionError(f"{key} exited with {proc.returncode} while waiting for {what}\n{self.logs()}")
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.logs()}")
