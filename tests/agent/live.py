"""A live cluster for end-to-end tests: a real platform Celery worker and real node agents.

They run as subprocesses against the same broker and the same test database as the test:
  - embedded mode: the filesystem broker and SQLite; the subprocesses get their own OPENDLC_VAR_DIR
    in which `opendlc.sqlite3` and `broker` are links to the test's database file and broker folder;
  - DATABASE_URL/REDIS_URL set: PostgreSQL (the test database pytest-django created) and Redis.
The test process shares the schedule-request flag (settings.VAR_DIR or Redis) and the pod root.
"""

import os
import signal
import sys
from pathlib import Path

from agent import procs
from agent.process import MARKER, marker
from bench import harness

REPO = harness.REPO
PLATFORM_QUEUES = ("default", "scheduler")


class LiveCluster(harness.Services):
    """The benchmark services' plumbing (bench/harness.py), with one platform worker for both
    queues, agents of real nodes, and the pods those agents leave behind cleaned up on close."""

    def __init__(self, tmp_path: Path, settings, *, heartbeat_s: int = 1, node_lost_after_s: int = 3):
        var, env = harness.shared_with_test(tmp_path, settings)
        self.pod_root = var / "pods"
        self.nodes: list[str] = []
        # The test process requests schedule cycles and builds start messages like the platform does.
        settings.OPENDLC_POD_ROOT = self.pod_root
        settings.OPENDLC_NODE_LOST_AFTER_S = node_lost_after_s
        env.update({"OPENDLC_POD_ROOT": str(self.pod_root), "OPENDLC_HEARTBEAT_INTERVAL_S": str(heartbeat_s),
                    "OPENDLC_NODE_LOST_AFTER_S": str(node_lost_after_s)})
        super().__init__(var, env, queues=(*PLATFORM_QUEUES, "agent.e2e-a", "agent.e2e-b", "agent.simulated"))

    def start_platform(self) -> None:
        self._worker("e2e-platform", ",".join(PLATFORM_QUEUES), 2, loglevel="INFO")

    def start_agent(self, node: str, runtime: str = "process"):
        if node not in self.nodes:
            self.nodes.append(node)
        return self._spawn(f"agent-{node}", [sys.executable, "manage.py", "agent", "--node", node, "--concurrency", "2",
                                             "--runtime", runtime,
                                             # The pod root is in the test's private temporary directory.
                                             "--pod-user", ""], agent=node)

    def start_simulated_agent(self):
        return self._spawn("simagent", [sys.executable, "manage.py", "agent", "--simulated"], agent="simulated")

    def kill(self, key: str) -> None:
        proc = self.processes.pop(key)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        super().close()
        # The pods the agents started (agents leave them running on purpose).
        for node in self.nodes:
            for pgid in self.pod_groups(node):
                procs.signal_group(pgid, signal.SIGKILL)

    def pod_groups(self, node: str) -> set[int]:
        """The process groups of the pods this cluster's agent of `node` started."""
        return procs.groups_with_env(MARKER, marker(node, self.pod_root))
