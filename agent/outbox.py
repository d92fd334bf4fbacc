"""Messages from an agent to the platform, batched and sent by one thread.

Executors call `put("jobs.pod_reports", {...})` from any thread; the sender thread sends each task's
items as one list argument every `flush_s` seconds, or sooner when `max_batch` items wait, so a
simulated agent finishing thousands of pods sends a few dozen messages, not thousands.

A pod's end frees its GPUs for the jobs waiting on them, so it goes within `end_window_s`, not at
the next flush, which shortens the time a GPU idles between one pod and the next; the window still
gathers a burst of ends (a simulated agent's thousand a second) into one message.
An urgent report (the end of a pod the platform stopped: a preempting job waits for its GPUs, a
user for the stop) is sent at once, with whatever waits to go before it; those are few.
"""

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from agent import auth

log = logging.getLogger(__name__)

# Within one flush, logs go before progress and progress before status reports: the platform should
# see a pod's last log lines before it learns that the pod ended.
ORDER = ("jobs.pod_logs", "jobs.pod_progress", "jobs.pod_reports")

Send = Callable[[str, list], None]
ENDED = ("Succeeded", "Failed")


def utcnow_iso() -> str:
    return datetime.now(UTC).isoformat()


def celery_sender(app, token: str, agent: str) -> Send:
    """Send each batch as one task on the platform's `default` queue, signed as `agent`."""

    def send(task_name: str, items: list) -> None:
        app.send_task(task_name, args=[auth.sign(token, agent, task_name, items)], queue="default")

    return send


class Outbox:
    def __init__(self, send: Send, *, flush_s: float = 0.05, end_window_s: float = 0.01, max_batch: int = 200):
        self._send = send
        self.flush_s = flush_s
        self.end_window_s = end_window_s
        self.max_batch = max_batch
        self._items: dict[str, list] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._due: float | None = None  # send by then (monotonic), before the next flush
        # Each running pod's Running report (when, and how it runs): its end report says so again,
        # because the two may be applied out of order by the platform's workers, and a late Running
        # report is ignored.
        self._started: dict[str, tuple[str, str]] = {}
        self._thread = threading.Thread(target=self._run, name="agent-outbox", daemon=True)
        self._thread.start()

    def put(self, task_name: str, item: dict) -> None:
        with self._cond:
            waiting = self._items.setdefault(task_name, [])
            waiting.append(item)
            if len(waiting) >= self.max_batch:
                self._cond.notify()

    def report(self, pod_id: str, status: str, *, exit_code=None, reason: str = "", message: str = "",
               urgent: bool = False) -> None:
        """A pod's status. Its end goes within end_window_s; urgent: now (see the module docstring)."""
        item = {"pod_id": pod_id, "status": status, "exit_code": exit_code, "at": utcnow_iso(),
                "reason": reason, "message": message}
        with self._cond:
            if status == "Running":
                self._started[pod_id] = (item["at"], message)
            elif pod_id in self._started:
                item["started"], item["started_message"] = self._started.pop(pod_id)
        self.put("jobs.pod_reports", item)
        if urgent or status in ENDED:
            due = time.monotonic() + (0.0 if urgent else self.end_window_s)
            with self._cond:
                if self._due is None or due < self._due:
                    self._due = due
                    self._cond.notify()

    def flush(self) -> None:
        """Send everything waiting now, from the calling thread."""
        with self._cond:
            items, self._items = self._items, {}
        self._send_all(items)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)
        self.flush()

    def _run(self) -> None:
        while True:
            with self._cond:
                flush_at = time.monotonic() + self.flush_s
                while not (self._closed or self._full()):
                    left = min(flush_at, self._due or flush_at) - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._closed:
                    return
                items, self._items, self._due = self._items, {}, None
            if not self._send_all(items):
                with self._cond:  # back off while the broker is unreachable
                    self._cond.wait_for(lambda: self._closed, timeout=1.0)

    def _full(self) -> bool:
        return any(len(v) >= self.max_batch for v in self._items.values())

    def _send_all(self, items: dict[str, list]) -> bool:
        names = sorted(items, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))
        for position, name in enumerate(names):
            batch = items[name]
            for start in range(0, len(batch), self.max_batch):
                try:
                    self._send(name, batch[start:start + self.max_batch])
                except Exception:
                    # The broker is unreachable: keep what is unsent, in order, for the next flush.
                    log.exception("could not send %s; will retry", name)
                    self._requeue({name: batch[start:], **{n: items[n] for n in names[position + 1:]}})
                    return False
        return True

    def _requeue(self, unsent: dict[str, list]) -> None:
        with self._cond:
            for name, batch in unsent.items():
                self._items[name] = batch + self._items.get(name, [])
