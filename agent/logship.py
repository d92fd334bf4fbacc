"""Shipping pod logs and EasyCkpt progress to the platform.

Logs go as chunks {pod_id, offset, text}: `offset` is the byte offset of the chunk in the pod's log,
so the platform stores each chunk once however often it arrives. A chunk ends at a line break
unless it is the pod's last or a single line longer than the chunk size.

Progress: the pod's EasyCkpt progress file ($OPENDLC_PROGRESS_FILE, else
$OPENDLC_CKPT_DIR/progress.json) is read whenever its size or mtime changes and sent as
{pod_id, step, checkpoint_at, progress_at} (plus progress_step, the
last step reported without a checkpoint).
"""

import codecs
import json
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024


class LogShipper:
    def __init__(self, outbox, pods, *, interval_s: float = 1.0):
        self.outbox = outbox
        self._pods = pods  # callable returning the pods to watch
        self.interval_s = interval_s
        self._shipped: dict[str, int] = {}
        self._progress_seen: dict[str, tuple] = {}
        self._locks: dict[str, threading.Lock] = {}
        # Pods shipped for the last time. A pass of the shipping thread works on the list of pods it
        # took before it began: without this, a pod that ended meanwhile was shipped again from
        # offset 0 after its final shipping had forgotten it. Forgotten once the executor no longer
        # lists the pod, after which no pass can take it up again.
        self._finished: set[str] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-logship", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.ship_all()

    def ship_all(self) -> None:
        """One pass over the pods to watch (the shipping thread's, every interval_s)."""
        pods = self._pods()
        for pod in pods:
            try:
                self.ship(pod)
            except Exception:
                log.exception("shipping logs of pod %s failed", pod.pod_id)
        listed = {pod.pod_id for pod in self._pods()}  # now, not the pass's list: see _finished
        with self._guard:
            self._finished &= listed

    def _lock_for(self, pod_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(pod_id, threading.Lock())

    def ship(self, pod, *, final: bool = False) -> None:
        """Send what is new in the pod's log and progress file; `final` sends everything and forgets the pod."""
        with self._lock_for(pod.pod_id):
            if pod.pod_id in self._finished:
                return
            self._ship_log(pod, final)
            self._ship_progress(pod)
            if final:
                self._finished.add(pod.pod_id)
        if final:
            with self._guard:
                self._locks.pop(pod.pod_id, None)
                self._shipped.pop(pod.pod_id, None)
                self._progress_seen.pop(pod.pod_id, None)

    def _ship_log(self, pod, final: bool) -> None:
        offset = self._shipped.get(pod.pod_id, 0)
        try:
            with open(pod.log_path, "rb") as f:
                f.seek(offset)
                while data := f.read(CHUNK_BYTES):
                    data = _whole_lines(data, at_end=final and len(data) < CHUNK_BYTES)
                    if not data:
                        break
                    self.outbox.put("jobs.pod_logs", {
                        "pod_id": pod.pod_id, "offset": offset, "text": data.decode("utf-8", "replace"),
                    })
                    offset += len(data)
                    f.seek(offset)
        except FileNotFoundError:
            return
        self._shipped[pod.pod_id] = offset

    def _ship_progress(self, pod) -> None:
        path = progress_path(pod)
        try:
            st = path.stat()
        except OSError:
            return
        signature = (st.st_mtime_ns, st.st_size)
        if self._progress_seen.get(pod.pod_id) == signature:
            return
        self._progress_seen[pod.pod_id] = signature
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return  # written atomically by EasyCkpt, so this is someone else's file; try next time
        last = data.get("last_progress") or {}
        self.outbox.put("jobs.pod_progress", {
            "pod_id": pod.pod_id,
            "step": data.get("step"),  # of the newest durable checkpoint
            "checkpoint_at": _iso(data.get("time")),
            "progress_at": _iso(last.get("time")),
            "progress_step": last.get("step"),
        })


def _whole_lines(data: bytes, *, at_end: bool) -> bytes:
    """The chunk up to its last line break, unless it is the end of the log or one long line."""
    if at_end:
        return data
    cut = data.rfind(b"\n") + 1
    if cut == 0 and len(data) == CHUNK_BYTES:
        # One line longer than a chunk: cut it, but not inside a UTF-8 character.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        decoder.decode(data, final=False)
        cut = len(data) - len(decoder.getstate()[0])
    return data[:cut]


def progress_path(pod) -> Path:
    env = pod.env
    if env.get("OPENDLC_PROGRESS_FILE"):
        return pod.workdir / env["OPENDLC_PROGRESS_FILE"]  # an absolute path stays as it is
    return pod.workdir / env.get("OPENDLC_CKPT_DIR", "checkpoints") / "progress.json"


def _iso(epoch) -> str | None:
    if not isinstance(epoch, int | float):
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat()
