"""What a pod mounts, whatever runs it: its start message's data_sources and code_source turned
into `Mount`s (host path -> path in the pod), the code source cloned on the way.

A runtime then makes each Mount appear: the process runtime by a link (agent/process.py), a
container runtime by a bind mount (read-only for datasets).
"""

from __future__ import annotations

import threading
from pathlib import Path

from agent.code import CloneError, clone
from agent.mounts import MOUNTS_FILE, Mount, MountError, host_path

DATA_SOURCE_FAILED = "DataSourceMountFailed"
CLONE_FAILED = "CodeSourceCloneFailed"

# One small lock per code directory cloned since the agent started: a few thousand jobs cost little.
_clone_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class SourceError(Exception):
    """A source the pod cannot have; `reason` is the pod's reason code."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


def pod_mounts(spec: dict, job_dir: Path, *, mounts_file: str = MOUNTS_FILE) -> list[Mount]:
    """The pod's datasets (read-only) and its code source, cloned once per job on this node into
    <job_dir>/code (the job's pods share it)."""
    mounts = []
    for source in spec.get("data_sources") or []:
        what = f"dataset {source['data_source_id']} ({source['uri']})"
        try:
            mounts.append(Mount(host_path(source["uri"], mounts_file), source["mount_path"], True, what))
        except (MountError, ValueError) as exc:
            raise SourceError(DATA_SOURCE_FAILED, f"{what}: {exc}") from None
    if code := spec.get("code_source"):
        dest = Path(job_dir) / "code"
        with _locks_guard:
            lock = _clone_locks.setdefault(str(dest), threading.Lock())
        with lock:  # two pods of one job starting together clone once
            try:
                clone(code["repo"], code.get("branch") or "", code.get("commit") or "", dest)
            except CloneError as exc:
                raise SourceError(CLONE_FAILED, f"code source {code['code_source_id']} ({code['repo']}): {exc}") \
                    from None
        mounts.append(Mount(str(dest), code["mount_path"], False, f"code source {code['code_source_id']}"))
    return mounts
