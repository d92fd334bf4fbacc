"""Hang detection: a Running job with Hang Detection on whose pods printed nothing and reported no
progress for its hang interval is restarted by AIMaster (cause Hang, counted).

A job's last sign of life is the newest of: the start of its current pods, the arrival of a log
chunk of a current pod (PodLog.received_at), and the job's last progress or checkpoint report
(EasyCkpt, through jobs.pod_progress). Progress is reported per job, so a hang restarts the
whole job whatever its run type. `now` is a parameter everywhere; beat calls detect_hangs().
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from jobs import aimaster
from jobs.models import Job, Pod, PodLog, RestartRecord
from jobs.states import JobStatus


def last_sign_of_life(job: Job) -> datetime | None:
    current = Pod.objects.filter(job=job, current=True)
    started = current.aggregate(at=Max("started_at"))["at"]
    logged = PodLog.objects.filter(pod__in=current).aggregate(at=Max("received_at"))["at"]
    signs = [t for t in (started, logged, job.last_progress_at, job.last_checkpoint_at, job.running_at) if t]
    return max(signs) if signs else None


def silent_for(job: Job, now: datetime) -> timedelta | None:
    """How long the job has been silent, or None when it has never run."""
    last = last_sign_of_life(job)
    return now - last if last else None


def detect_hangs(now: datetime | None = None) -> list[str]:
    """Restart (or fail, past the limit) every hung job; returns their job ids."""
    now = now or timezone.now()
    hung = []
    for pk in Job.objects.filter(status=JobStatus.RUNNING, ft_enabled=True).values_list("pk", flat=True):
        with transaction.atomic():
            # Re-read under the lock: it may have moved on.
            job = Job.objects.locked().get(pk=pk)
            if job.status == JobStatus.RUNNING and _restart_if_hung(job, now):
                hung.append(job.job_id)
    return hung


def _restart_if_hung(job: Job, now: datetime) -> bool:
    config = aimaster.config_for(job)
    if not config.hang_detection:
        return False
    silent = silent_for(job, now)
    if silent is None or silent < timedelta(seconds=config.hang_interval_s):
        return False
    message = (f"Hang detected: no log output and no progress report for {int(silent.total_seconds())} s "
               f"(hang interval {config.hang_interval_s} s)")
    return aimaster.restart_or_fail(job, config, RestartRecord.Cause.HANG, message, now)
