"""Progress file the platform's node agent reads: last checkpoint and last sign of life.

    import easyckpt
    easyckpt.report_progress(step)     # e.g. every step; cheap, throttled to 1 write/s

The file is JSON, replaced atomically so a reader never sees half of it:

    {"step": 120, "time": 1767000000.0, "path": "/ckpt/job-1/step-120.ckpt",
     "last_progress": {"step": 123, "time": 1767000004.2}}

"step"/"time"/"path" describe the newest durable checkpoint (written by Checkpointer);
"last_progress" is the newest step the job reported, used to tell a slow job from a hung one.
Path: env OPENDLC_PROGRESS_FILE, else <checkpoint dir>/progress.json. No fsync: the file is
advisory (the checkpoint manifests are the truth), and the agent reads it from the same node.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from easyckpt.storage import atomic_write_bytes

CKPT_DIR_ENV = "OPENDLC_CKPT_DIR"
PROGRESS_FILE_ENV = "OPENDLC_PROGRESS_FILE"
DEFAULT_CKPT_DIR = "checkpoints"
REPORT_INTERVAL_S = 1.0

# The progress file of the most recently created Checkpointer: report_progress() writes next to
# the checkpoints even when they live in an explicit dir rather than the env's.
default_file: Path | None = None

# The writer thread and the training thread both read-modify-write the file.
_lock = threading.Lock()
_last_report: dict[Path, float] = {}


def checkpoint_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The argument, else env OPENDLC_CKPT_DIR (set per job by the agent), else ./checkpoints."""
    return Path(explicit or os.environ.get(CKPT_DIR_ENV) or DEFAULT_CKPT_DIR).absolute()


def progress_path(ckpt_dir: Path | None = None) -> Path:
    env = os.environ.get(PROGRESS_FILE_ENV)
    return Path(env).absolute() if env else (ckpt_dir or checkpoint_dir()) / "progress.json"


def read_progress(path: Path) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _update(path: Path, fields: dict) -> None:
    with _lock:
        data = read_progress(path)
        data.update(fields)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps(data).encode(), durable=False)


def record_checkpoint(path: Path, step: int, ckpt_path: Path, now: float | None = None) -> None:
    now = time.time() if now is None else now
    _update(path, {"step": step, "time": now, "path": str(ckpt_path)})


def report_progress(
    step: int, *, path: str | os.PathLike | None = None, force: bool = False
) -> bool:
    """Record that training reached `step`, without checkpointing. Returns whether it wrote.

    Path: `path`, else env OPENDLC_PROGRESS_FILE, else the last Checkpointer's progress file, else
    ./checkpoints/progress.json. Writes at most once per second per file unless `force`, so
    calling it every step is cheap.
    """
    if path:
        target = Path(path).absolute()
    elif os.environ.get(PROGRESS_FILE_ENV) or default_file is None:
        target = progress_path()
    else:
        target = default_file
    now = time.monotonic()
    if not force and now - _last_report.get(target, -REPORT_INTERVAL_S) < REPORT_INTERVAL_S:
        return False
    _last_report[target] = now
    _update(target, {"last_progress": {"step": int(step), "time": time.time()}})
    return True
