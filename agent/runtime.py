"""One agent process: an executor, the outbox to the platform, and the heartbeat loop.

The Celery tasks in agent/tasks.py hand their message to `current()`, the agent this process runs.
"""

import logging
import threading

from agent import auth
from agent.machine import Machine
from agent.metrics import METRICS_TASK, PodSampler
from agent.outbox import Outbox, utcnow_iso

log = logging.getLogger(__name__)

SIMULATED_QUEUE = "agent.simulated"
HEARTBEAT_TASK = "nodes.heartbeat"

_current = None


def current():
    if _current is None:
        raise RuntimeError("no agent runs in this process (start one with `manage.py agent`)")
    return _current


def queue_for(node: str | None) -> str:
    """`agent.<node>` for a process node; `agent.simulated` for the one agent of all simulated nodes."""
    return f"agent.{node}" if node else SIMULATED_QUEUE


class Agent:
    def __init__(self, node: str | None, executor, outbox: Outbox, machine: Machine | None, *,
                 send_heartbeat, heartbeat_s: float, token: str, replay_window_s: float,
                 sampler: PodSampler | None = None):
        self.node = node  # None: the simulated agent, serving every simulated node
        self.executor = executor
        self.outbox = outbox
        self.machine = machine
        self.token = token  # the join token of this node (agent/auth.py)
        self.replay_window_s = replay_window_s
        self._send_heartbeat = send_heartbeat
        self.heartbeat_s = heartbeat_s
        self.sampler = sampler  # None: no pod metrics (the simulated agent's pods use nothing)
        # When this process started: the platform fails the pods that ran before it and that it
        # neither adopted nor reported (jobs/nodes.py reclaim_orphans).
        self.booted = utcnow_iso()
        self._stop = threading.Event()

    @property
    def queue(self) -> str:
        return queue_for(self.node)

    @property
    def name(self) -> str:
        """Who this agent signs as: its node, or "simulated"."""
        return self.node or auth.SIMULATED

    def unseal(self, task: str, sealed) -> list:
        """The items of a message the platform sealed for this agent (raises auth.Refused)."""
        return auth.unseal(self.token, task, sealed, self.replay_window_s)

    def heartbeat(self) -> dict:
        running = self.executor.running_pod_ids()
        beat = {"node": self.node, "executor": self.executor.kind, "at": utcnow_iso(), "boot": self.booted,
                "running_pods": len(running)}
        if self.node:  # the simulated agent may hold thousands of pods; the platform does not reconcile them
            beat["running_pod_ids"] = running
        if self.machine is not None:
            beat.update(self.machine.as_payload())
        return beat

    def beat_once(self) -> None:
        try:
            self._send_heartbeat(auth.sign(self.token, self.name, HEARTBEAT_TASK, self.heartbeat()))
        except Exception:
            log.exception("heartbeat not sent; will retry")
        self.sample_pods()

    def sample_pods(self) -> None:
        """Each running pod's usage, to the platform with the next flush (jobs.pod_metrics)."""
        if self.sampler is None:
            return
        try:
            for sample in self.sampler.sample(self.executor.metric_targets()):
                self.outbox.put(METRICS_TASK, sample)
        except Exception:
            log.exception("pod metrics not sampled; will retry")

    def _beat_forever(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            self.beat_once()

    def start(self) -> None:
        global _current
        _current = self
        self.executor.run()
        self.beat_once()  # registers the node before the first pod can be scheduled on it
        threading.Thread(target=self._beat_forever, name="agent-heartbeat", daemon=True).start()

    def close(self) -> None:
        global _current
        self._stop.set()
        self.executor.close()
        self.outbox.close()
        if _current is self:
            _current = None
