"""Which job events a status change is, and the JSON body that tells a receiver about it.

    -> Running                          Running
    -> Succeeded                        Succeeded
    -> Failed                           Failed (+ Preempted / SpotReleased when that is the reason)
    -> Restarting (AIMaster restart)    Restarted (+ Preempted / SpotReleased when that is the cause)

A subscription gets one delivery per status change that is any event it chose, named by the most
specific of them (MOST_SPECIFIC_FIRST); the body lists all of them.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from jobs.dispatch import PREEMPTED, SPOT_RELEASED
from jobs.history import Transition
from jobs.models import RestartRecord
from jobs.states import JobStatus
from notify.models import Event

MOST_SPECIFIC_FIRST = (Event.SPOT_RELEASED, Event.PREEMPTED, Event.RESTARTED, Event.FAILED, Event.SUCCEEDED,
                       Event.RUNNING)
# The reasons jobs give these causes: a pod's stop reason when the job fails, AIMaster's when it restarts.
CAUSES = {PREEMPTED: Event.PREEMPTED, SPOT_RELEASED: Event.SPOT_RELEASED,
          f"Restart{RestartRecord.Cause.PREEMPTION}": Event.PREEMPTED,
          f"Restart{RestartRecord.Cause.SPOT_RELEASE}": Event.SPOT_RELEASED}
BY_STATUS = {JobStatus.RUNNING: Event.RUNNING, JobStatus.SUCCEEDED: Event.SUCCEEDED, JobStatus.FAILED: Event.FAILED,
             JobStatus.RESTARTING: Event.RESTARTED}


def events_of(status: str, reason: str) -> frozenset[str]:
    """The events a change to `status` for `reason` is; empty for the steps nobody subscribes to."""
    if status not in BY_STATUS:
        return frozenset()
    cause = CAUSES.get(reason) if status in (JobStatus.FAILED, JobStatus.RESTARTING) else None
    return frozenset({BY_STATUS[status], *([cause] if cause else [])})


def named(events: frozenset[str], chosen) -> str | None:
    """The event a subscription that chose `chosen` is told, or None when it chose none of them."""
    return next((e for e in MOST_SPECIFIC_FIRST if e in events and e in chosen), None)


def new_uid() -> str:
    return uuid.uuid4().hex


def job_body(uid: str, event: str, events: frozenset[str], t: Transition, *, workspace: tuple[int, str],
             job: tuple[str, str], now: datetime) -> str:
    """The JSON a receiver gets for a status change: `workspace` (pk, name), `job` (job_id, display name)."""
    return _dump({
        "id": uid, "event": event, "events": [e for e in MOST_SPECIFIC_FIRST if e in events],
        "created_at": now.isoformat(), "workspace": {"id": workspace[0], "name": workspace[1]},
        "job": {"job_id": job[0], "display_name": job[1], "status": t.status, "previous_status": t.previous,
                "reason": t.reason, "message": t.message, "at": t.at.isoformat()},
    })


def test_event_body(uid: str, *, workspace: tuple[int, str], now: datetime) -> str:
    return _dump({"id": uid, "event": "Test", "events": ["Test"], "created_at": now.isoformat(),
                  "workspace": {"id": workspace[0], "name": workspace[1]}, "job": None})


def _dump(body: dict) -> str:
    return json.dumps(body, separators=(",", ":"))


def parse(body: str) -> dict:
    return json.loads(body)
