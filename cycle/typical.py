"""Each quota's typical run: what a job without a maximum running time is expected to take.

The median run of the quota's jobs that finished in the last TYPICAL_DAYS (scheduler.reservation
owns that rule, which the trace replay follows too); DEFAULT_RUN when none did. The start
estimate (cycle/estimate.py) reads it, and so does every schedule cycle's snapshot, for the
expected ends a reservation counts on: the cycle reuses a reading for REFRESH, since a run of
history moves that median slowly and the query reads days of finished jobs.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta

from jobs.models import Job
from jobs.states import FINAL
from scheduler import reservation

TYPICAL_DAYS = reservation.TYPICAL_DAYS
DEFAULT_RUN = timedelta(hours=1)
REFRESH_S = 300

_lock = threading.Lock()
_kept: dict = {"at": None, "runs": {}}


def typical_runs(now: datetime) -> dict[str | None, tuple[timedelta, bool]]:
    """quota name (None: jobs of no quota) -> (the median run of its jobs finished in the last
    TYPICAL_DAYS, True); a quota without any is left out (the caller takes DEFAULT_RUN)."""
    runs: dict[str | None, list[timedelta]] = defaultdict(list)
    for quota, running_at, finished_at in Job.objects.filter(
            status__in=FINAL, finished_at__gte=now - timedelta(days=TYPICAL_DAYS), running_at__isnull=False,
    ).order_by().values_list("quota__name", "running_at", "finished_at"):
        runs[quota].append(finished_at - running_at)
    return {quota: (reservation.typical_run(found), True) for quota, found in runs.items()}


def for_cycle(now: datetime) -> dict[str | None, timedelta]:
    """quota name -> its typical run (DEFAULT_RUN without history) as a cycle uses it, read again
    once REFRESH_S has passed."""
    with _lock:
        if _kept["at"] is None or time.monotonic() - _kept["at"] >= REFRESH_S:
            _kept["runs"] = {quota: run for quota, (run, _) in typical_runs(now).items()}
            _kept["at"] = time.monotonic()
        return _kept["runs"]


def forget() -> None:
    """Read the history again at the next cycle (tests)."""
    with _lock:
        _kept["at"] = None
