"""Asking for a schedule cycle, and the schedule task's side of the same flag and wake-up list.

Every event that can change a decision calls `request_cycle()`; beat runs one every
OPENDLC_SCHEDULE_INTERVAL_S too. Requests are coalesced: the first request since the last cycle
began sets a flag (Redis SET NX with REDIS_URL; in embedded mode, where everything runs on one
machine, a flag file created with O_EXCL) and sends one task, by name, so that nothing that asks
for a cycle imports the cycle; later requests see the flag and send nothing. The task clears the
flag as it starts (`clear_request`), so a request made while a cycle runs gets a cycle after it,
once the task's rest (`rest`) is over: requests made meanwhile join that cycle. A flag older than
REQUEST_TTL_S counts as gone, in case its task was lost; beat repairs anything else. No countdown
on the task: a reclaim would wait it out, and the rest already gathers bursts on a busy machine.
A request that cannot be sent (the broker is down) is logged and left to beat: the change it was
for is committed and its caller is answered as usual.
"""

from __future__ import annotations

import logging
import os
import time

from celery import current_app
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

SCHEDULE_TASK = "cycle.schedule"
REQUEST_TTL_S = 30
_FLAG_KEY = "opendlc:schedule-requested"
_WAKE_KEY = "opendlc:schedule-wake"  # a list: BLPOP waits on it with a timeout
_redis_client = None


def request_cycle(freed: bool = False) -> None:
    """Ask for a schedule cycle soon. Inside a transaction the request is made when it commits,
    so a rolled-back change asks for nothing; bursts of requests lead to one cycle.

    freed: the change freed capacity (a pod ended), so the cycle should not wait out the
    schedule task's rest: a freed node idles until a cycle gives it a job. Other requests (a
    submission, a new priority) may wait for the rest: they join the cycle it ends with."""
    if freed:
        transaction.on_commit(_end_rest)
    transaction.on_commit(_request_now)


def _request_now() -> None:
    if not _claim_request():
        return  # a cycle is already on its way and will see this change
    try:
        current_app.send_task(SCHEDULE_TASK, expires=REQUEST_TTL_S)
    except Exception:
        # The change is committed and must be answered as done; beat's next cycle sees it. The flag
        # goes, so that the next request tries to send again rather than wait out its TTL.
        log.exception("could not send the schedule request; beat's next cycle will see the change")
        clear_request()


def _claim_request() -> bool:
    try:
        if settings.REDIS_URL:
            return bool(_redis().set(_FLAG_KEY, "1", nx=True, ex=REQUEST_TTL_S))
        return _claim_flag_file()
    except Exception:  # cannot coalesce: better one cycle too many than a missed one
        log.exception("could not coalesce the schedule request")
        return True


def rest(seconds: float) -> None:
    """The schedule task's rest before its cycle, cut short by a request that freed capacity
    (request_cycle(freed=True)) with REDIS_URL; in embedded mode a plain sleep."""
    if seconds < 0.001:
        return
    if settings.REDIS_URL:
        try:
            _redis().blpop([_WAKE_KEY], timeout=seconds)
            return
        except Exception:  # Redis is down: the rest is still owed
            log.exception("could not wait on the schedule wake-up list")
    time.sleep(seconds)


def cycle_requested() -> bool:
    """Whether another cycle was requested since this one began: it follows at once (capacity was
    freed: a wake-up waits) or after the task's rest."""
    try:
        if settings.REDIS_URL:
            return _redis().exists(_FLAG_KEY, _WAKE_KEY) > 0
        return _flag_file().exists()
    except Exception:
        log.exception("could not read the schedule request flag")
        return False


def _end_rest() -> None:
    if not settings.REDIS_URL:
        return
    try:
        _redis().pipeline().rpush(_WAKE_KEY, 1).expire(_WAKE_KEY, REQUEST_TTL_S).execute()
    except Exception:  # only the rest is not cut short
        log.exception("could not wake the schedule task")


def clear_request() -> None:
    """Called by the schedule task as it starts: requests from now on need a new cycle, and a
    wake-up from before is spent (the cycle about to start sees what freed the capacity)."""
    try:
        if settings.REDIS_URL:
            _redis().delete(_FLAG_KEY, _WAKE_KEY)
        else:
            _flag_file().unlink(missing_ok=True)
    except Exception:
        log.exception("could not clear the schedule request flag")


def _redis():
    global _redis_client  # one connection pool per process, made on first use
    if _redis_client is None:
        import redis

        _redis_client = redis.Redis.from_url(settings.REDIS_URL)
    return _redis_client


def _flag_file():
    return settings.VAR_DIR / "schedule-requested"


def _claim_flag_file() -> bool:
    path = _flag_file()
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # O_EXCL: one winner
        return True
    except FileExistsError:
        if time.time() - path.stat().st_mtime < REQUEST_TTL_S:
            return False
        os.utime(path)  # stale: its task was lost
        return True
