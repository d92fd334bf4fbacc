"""Small tools for agent tests: a recording outbox sender and waiting on conditions."""

import threading
import time


class Recorder:
    """Stands in for the broker: keeps every batch the outbox sends."""

    def __init__(self):
        self.sent: list[tuple[str, list]] = []
        self._lock = threading.Lock()

    def __call__(self, task_name: str, items: list) -> None:
        with self._lock:
            self.sent.append((task_name, list(items)))

    def items(self, task_name: str) -> list[dict]:
        with self._lock:
            return [item for name, batch in self.sent if name == task_name for item in batch]

    def reports(self, pod_id: str | None = None) -> list[dict]:
        return [r for r in self.items("jobs.pod_reports") if pod_id is None or r["pod_id"] == pod_id]

    def final_report(self, pod_id: str) -> dict | None:
        ended = [r for r in self.reports(pod_id) if r["status"] in ("Succeeded", "Failed")]
        return ended[-1] if ended else None

    def log_text(self, pod_id: str) -> str:
        chunks = sorted((c for c in self.items("jobs.pod_logs") if c["pod_id"] == pod_id), key=lambda c: c["offset"])
        return "".join(c["text"] for c in chunks)


def wait_for(condition, timeout: float = 30.0, interval: float = 0.05):
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s: {getattr(condition, '__name__', condition)}")
        time.sleep(interval)
