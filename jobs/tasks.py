"""Celery tasks of the jobs app: thin wrappers over jobs/lifecycle.py, hang.py, logs.py, nodes.py.
The schedule task is the cycle's (cycle/tasks.py).

    jobs.tasks.enforce_max_running_time  queue 'scheduler'  beat: stop jobs past their limit
    jobs.tasks.detect_hangs              queue 'scheduler'  beat: AIMaster restarts hung jobs
    jobs.tasks.roll_up_usage             queue 'default'    beat: finished pods' GPU-seconds into GpuDayUse
    jobs.pod_reports                     queue 'default'    agent -> platform: [{pod_id, status, ...}]
    jobs.pod_progress                    queue 'default'    agent -> platform: EasyCkpt progress
    jobs.pod_logs                        queue 'default'    agent -> platform: log chunks
    jobs.pod_metrics                     queue 'default'    agent -> platform: pods' CPU, memory, GPU
    nodes.heartbeat                      queue 'default'    agent -> platform: the node is alive
    nodes.reap_lost                      beat               nodes without heartbeats go NotReady;
                                                            lost start messages sent again

An agent's message is a signed envelope (agent/auth.py); each task opens it (jobs/agents.py) before
anything is applied, and applies a report only about pods bound to the sender's node.
"""

from celery import shared_task
from django.db import OperationalError

from jobs import agents, dispatch, hang, lifecycle, logs, metrics, nodes, usage_history

# Transient database errors (a lost connection, SQLite busy past its timeout) are worth a retry;
# reports are idempotent, so retrying a batch that was partly applied is safe.
RETRY = dict(autoretry_for=(OperationalError,), retry_backoff=True, retry_backoff_max=30, max_retries=5)


@shared_task(name="jobs.tasks.enforce_max_running_time", ignore_result=True)
def enforce_max_running_time() -> int:
    return lifecycle.enforce_max_running_time()


@shared_task(name="jobs.tasks.detect_hangs", ignore_result=True)
def detect_hangs() -> list[str]:
    return hang.detect_hangs()


@shared_task(name="jobs.tasks.roll_up_usage", ignore_result=True, **RETRY)
def roll_up_usage() -> int:
    return usage_history.roll_up()


def _owned(task: str, envelope) -> list:
    """The verified items of an agent's batch about its own pods; [] when refused."""
    sender, items = agents.opened(task, envelope)
    return agents.own_pods(sender, task, items) if sender is not None else []


@shared_task(name="jobs.pod_reports", ignore_result=True, **RETRY)
def pod_reports(envelope: dict) -> int:
    return lifecycle.apply_reports(_owned("jobs.pod_reports", envelope))


@shared_task(name="jobs.pod_progress", ignore_result=True, **RETRY)
def pod_progress(envelope: dict) -> int:
    return lifecycle.apply_progress(_owned("jobs.pod_progress", envelope))


@shared_task(name="jobs.pod_logs", ignore_result=True)
def pod_logs(envelope: dict) -> None:
    logs.store_chunks(_owned("jobs.pod_logs", envelope))


@shared_task(name="jobs.pod_metrics", ignore_result=True)
def pod_metrics(envelope: dict) -> int:
    return metrics.store_samples(_owned("jobs.pod_metrics", envelope))


@shared_task(name="nodes.heartbeat", ignore_result=True)
def heartbeat(envelope: dict) -> None:
    sender, beat = agents.opened("nodes.heartbeat", envelope)
    if sender is not None:
        nodes.record_heartbeat(beat, sender)


@shared_task(name="nodes.reap_lost", ignore_result=True)
def reap_lost() -> None:
    nodes.reap_lost_nodes()
    dispatch.resend_unstarted()
