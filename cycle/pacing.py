"""How short of CPU the rest of this machine was: the schedule task's pacing asks after each cycle.

Cycles run back to back took a core from the reports, submissions and PostgreSQL they wait on,
so the task rests after each (cycle/schedule.py). On a machine with CPU to spare that rest only
delays the next binding, so it is scaled by how busy the other processes were (measurements:
docs/performance.md).

`Contention.since_last()` is the share of the CPU time the other processes could have had since the
last call that they did use, 0 to 1: the whole machine's busy time (Linux /proc/stat) less this
process's own (`time.process_time`, every thread). A scheduler alone on an idle machine sees 0; one
beside busy reports, submissions and PostgreSQL sees about 1. Hand-written rather than with psutil:
it is one line of /proc/stat, and the process's own time is the part psutil would not take out.

Where it cannot tell (the first call, no /proc/stat) it answers 1: the full rest, as before. A
container's CPU limit is not seen in /proc/stat; there the rest can be shorter than the limit would
call for, which costs CPU, not correctness.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds() -> list[float] | None:
    """The whole machine's CPU seconds since boot, by kind: user, nice, system, idle, iowait, irq,
    softirq, steal (Linux /proc/stat, all CPUs); None where /proc/stat is missing."""
    try:
        return [int(v) / _TICK for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None


def machine_times() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot; None where /proc/stat is missing.
    Busy is all but idle and iowait (steal counts as busy: those CPUs were not ours to give)."""
    values = cpu_seconds()
    if values is None:
        return None
    total = sum(values)
    return total - values[3] - values[4], total


class Contention:
    def __init__(self, read_machine=machine_times, read_own=time.process_time):
        self._read_machine, self._read_own = read_machine, read_own
        self._last: tuple[tuple[float, float] | None, float] | None = None

    def since_last(self) -> float:
        now = (self._read_machine(), self._read_own())
        last, self._last = self._last, now
        if last is None or last[0] is None or now[0] is None:
            return 1.0
        (busy, total), own = (b - a for a, b in zip(last[0], now[0])), now[1] - last[1]
        others_total = total - own
        if others_total <= 0:
            return 1.0
        return min(1.0, max(0.0, (busy - own) / others_total))
