"""Celery tasks of the jobs app: thin wrappers over jobs/scheduling.py and jobs/lifecycle.py.

    jobs.tasks.schedule                  queue 'scheduler'  one schedule cycle (beat + request_cycle)
    jobs.tasks.enforce_max_running_time  queue 'scheduler'  beat: stop jobs past their limit
    jobs.tasks.detect_hangs              queue 'scheduler'  beat: AIMaster restarts hung jobs
    jobs.pod_reports                     queue 'default'    agent -> platform: [{pod_id, status, ...}]
    jobs.pod_progress                    queue 'default'    agent -> platform: EasyCkpt progress
"""

from celery import shared_task
from django.db import OperationalError

from jobs import hang, lifecycle, scheduling

# Transient database errors (a lost connection, SQLite busy past its timeout) are worth a retry;
# reports are idempotent, so retrying a batch that was partly applied is safe.
RETRY = dict(autoretry_for=(OperationalError,), retry_backoff=True, retry_backoff_max=30, max_retries=5)


@shared_task(name="jobs.tasks.schedule", ignore_result=True)
def schedule() -> None:
    scheduling.run_paced_cycle()


@shared_task(name="jobs.tasks.enforce_max_running_time", ignore_result=True)
def enforce_max_running_time() -> int:
    return lifecycle.enforce_max_running_time()


@shared_task(name="jobs.tasks.detect_hangs", ignore_result=True)
def detect_hangs() -> list[str]:
    return hang.detect_hangs()


@shared_task(name="jobs.pod_reports", ignore_result=True, **RETRY)
def pod_reports(reports: list[dict]) -> int:
    return lifecycle.apply_reports(reports)


@shared_task(name="jobs.pod_progress", ignore_result=True, **RETRY)
def pod_progress(items: list[dict]) -> int:
    return lifecycle.apply_progress(items)
