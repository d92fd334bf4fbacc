"""The simulated executor (KWOK-like): pods hold their allocation for a while and end as told.

No host process: one timer thread keeps a heap of deadlines for every simulated pod of every
simulated node, so thousands of pods cost a few hundred bytes each. The pod's env says what to do:

    SIM_DURATION_S  seconds it runs (float, default 60)
    SIM_EXIT_CODE   non-zero: it then fails with this exit code
    SIM_STOP_S      seconds it takes to terminate after a stop (default 0)

A simulated pod writes a few log lines (what it stands in for, and how it ended), shipped as
jobs.pod_logs chunks like a real pod's, so its job page shows logs.
"""

import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass

from agent.outbox import Outbox

log = logging.getLogger(__name__)

DEFAULT_DURATION_S = 60.0


@dataclass
class SimPod:
    pod_id: str
    exit_code: int
    stop_s: float
    stop_reason: str = ""
    logged: int = 0  # bytes of its log shipped so far: the next chunk's offset


class SimulatedExecutor:
    kind = "simulated"

    def __init__(self, outbox: Outbox, *, clock=time.monotonic):
        self.outbox = outbox
        self.clock = clock
        self.pods: dict[str, SimPod] = {}
        self._heap: list[tuple[float, int, str, str]] = []  # (deadline, seq, pod_id, "end" | "stopped")
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sim-timers", daemon=True)

    def run(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def start(self, spec: dict) -> None:
        env = spec.get("env") or {}
        pod = SimPod(
            spec["pod_id"],
            exit_code=int(_number(env.get("SIM_EXIT_CODE"), 0)),
            stop_s=_number(env.get("SIM_STOP_S"), 0.0),
        )
        duration = _number(env.get("SIM_DURATION_S"), DEFAULT_DURATION_S)
        limit = spec.get("max_running_time_s")
        with self._cond:
            if pod.pod_id in self.pods:
                return
            self.pods[pod.pod_id] = pod
            self._push(duration, pod.pod_id, "end")
            if limit and limit < duration:
                self._push(limit, pod.pod_id, "max_running_time")
            self._log(pod, f"simulated pod {pod.pod_id}: no container runs (image {spec.get('image') or 'none'})",
                      f"$ {spec.get('command', '')}", f"running for {duration:g} s")
        self.outbox.report(pod.pod_id, "Running")

    def stop(self, pod_id: str, reason: str, grace_s: float) -> None:
        with self._cond:
            pod = self.pods.get(pod_id)
            if pod is None:
                self.outbox.report(pod_id, "Failed", reason=reason, message="stopped before it started", urgent=True)
                return
            if pod.stop_reason:
                return
            pod.stop_reason = reason
            self._push(min(pod.stop_s, grace_s), pod_id, "stopped")

    def resize(self, update: dict) -> None:
        """An in-place resize: a simulated pod has no training loop to tell, only its log."""
        with self._cond:
            pod = self.pods.get(update["pod_id"])
            if pod is not None and not pod.stop_reason:
                self._log(pod, f"resized in place: rank {update['rank']} of {update['world_size']} "
                               f"(generation {update['generation']})")

    def _log(self, pod: SimPod, *lines: str) -> None:
        """Ship lines of the pod's log, at their byte offset (jobs.logs stores each chunk once)."""
        text = "".join(f"{line}\n" for line in lines)
        self.outbox.put("jobs.pod_logs", {"pod_id": pod.pod_id, "offset": pod.logged, "text": text})
        pod.logged += len(text.encode())

    def running_pod_ids(self) -> list[str]:
        with self._cond:
            return list(self.pods)

    def _push(self, delay: float, pod_id: str, what: str) -> None:
        heapq.heappush(self._heap, (self.clock() + max(0.0, delay), next(self._seq), pod_id, what))
        if self._heap[0][2] == pod_id:
            self._cond.notify()  # the earliest deadline changed

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._due()
                if self._closed:
                    return
            for pod_id, what in due:
                self._fire(pod_id, what)

    def _due(self) -> list[tuple[str, str]]:
        """Wait for the next deadline; return everything due by then."""
        while not self._closed:
            now = self.clock()
            if self._heap and self._heap[0][0] <= now:
                due = []
                while self._heap and self._heap[0][0] <= now:
                    _, _, pod_id, what = heapq.heappop(self._heap)
                    due.append((pod_id, what))
                return due
            self._cond.wait(timeout=(self._heap[0][0] - now) if self._heap else None)
        return []

    def _fire(self, pod_id: str, what: str) -> None:
        if what == "max_running_time":
            self.stop(pod_id, "MaxRunningTime", 0)
            return
        with self._cond:
            pod = self.pods.get(pod_id)
            # A stopping pod ignores its natural end; a stale "end" for a gone pod is dropped.
            if pod is None or (what == "end" and pod.stop_reason):
                return
            del self.pods[pod_id]
        self._log(pod, f"stopped ({pod.stop_reason})" if pod.stop_reason else f"exited with code {pod.exit_code}")
        if pod.stop_reason:
            self.outbox.report(pod_id, "Failed", exit_code=137, reason=pod.stop_reason,
                               message=f"stopped ({pod.stop_reason})", urgent=True)
        elif pod.exit_code:
            self.outbox.report(pod_id, "Failed", exit_code=pod.exit_code, reason="Error",
                               message=f"simulated exit code {pod.exit_code}")
        else:
            self.outbox.report(pod_id, "Succeeded", exit_code=0)


def _number(value, default: float) -> float:
    try:
        return float(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default
