"""Celery tasks of the jobs app: thin wrappers over jobs/lifecycle.py, hang.py, logs.py, nodes.py.
The schedule task is the cycle's (cycle/tasks.py).

    jobs.tasks.enforce_max_running_time  queue 'scheduler'  beat: stop jobs past their limit
    jobs.tasks.detect_hangs              queue 'scheduler'  beat: AIMaster restarts hung jobs
    jobs.pod_reports                     queue 'default'    agent -> platform: [{pod_id, status, ...}]
    jobs.pod_progress                    queue 'default'    agent -> platform: EasyCkpt progress
    jobs.pod_logs                        queue 'default'    agent -> platform: log chunks
    jobs.pod_metrics                     queue 'default'    agent -> platform: pods' CPU, memory, GPU
    nodes.heartbeat                      queue 'default'    agent -> platform: the node is alive
    nodes.reap_lost                      beat               nodes without heartbeats go NotReady
"""

from celery import shared_task
from django.db import OperationalError

from jobs import hang, lifecycle, logs, metrics, nodes

# Transient database errors (a lost connection, SQLite busy past its timeout) are worth a retry;
# reports are idempotent, so retrying a batch that was partly applied is safe.
RETRY = dict(autoretry_for=(OperationalError,), retry_backoff=True, retry_backoff_max=30, max_retries=5)


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


@shared_task(name="jobs.pod_logs", ignore_result=True)
def pod_logs(chunks: list[dict]) -> None:
    logs.store_chunks(chunks)


@shared_task(name="jobs.pod_metrics", ignore_result=True)
def pod_metrics(samples: list[dict]) -> int:
    return metrics.store_samples(samples)


@shared_task(name="nodes.heartbeat", ignore_result=True)
def heartbeat(beat: dict) -> None:
    nodes.record_heartbeat(beat)


@shared_task(name="nodes.reap_lost", ignore_result=True)
def reap_lost() -> None:
    nodes.reap_lost_nodes()
