"""Process groups on Linux: who is in one, killing one, and finding the pods of an agent.

A group counts as gone when no live member is left. Zombies do not count: in a container whose
PID 1 does not reap orphans, an exited grandchild stays a zombie forever, yet holds nothing.
"""

import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")
POLL_S = 0.05


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, process group) of a process, or None when it is gone."""
    try:
        data = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ")".
    fields = data[data.rindex(")") + 2:].split()
    return fields[0], int(fields[2])


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir(PROC):
        if entry.isdigit():
            stat = _stat(entry)
            if stat and stat[1] == pgid and stat[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


def group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_gone(pgid: int, timeout: float | None) -> bool:
    """Wait until the group has no live member; False on timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while group_alive(pgid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def terminate_group(pgid: int, grace_s: float, *, kill_wait_s: float = 30) -> str:
    """SIGTERM, wait up to `grace_s`, then SIGKILL. Returns how it ended: 'exited' or 'killed'."""
    signal_group(pgid, signal.SIGTERM)
    if wait_gone(pgid, grace_s):
        return "exited"
    signal_group(pgid, signal.SIGKILL)
    wait_gone(pgid, kill_wait_s)
    return "killed"


def groups_with_env(name: str, value: str) -> set[int]:
    """Process groups having a live process whose environment holds name=value (our pods carry a
    marker variable, so a restarted agent finds them without any state)."""
    needle = f"{name}={value}".encode()
    groups = set()
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        try:
            environ = (PROC / entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            stat = _stat(entry)
            if stat and stat[0] not in ("Z", "X"):
                groups.add(stat[1])
    return groups
