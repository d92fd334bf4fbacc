"""Celery tasks of the platform side of the node agents: heartbeats, pod logs, lost nodes."""

from celery import shared_task

from jobs import logs
from quotas import nodes


@shared_task(name="nodes.heartbeat", ignore_result=True)
def heartbeat(beat: dict) -> None:
    nodes.record_heartbeat(beat)


@shared_task(name="nodes.reap_lost", ignore_result=True)
def reap_lost() -> None:
    nodes.reap_lost_nodes()


@shared_task(name="jobs.pod_logs", ignore_result=True)
def pod_logs(chunks: list[dict]) -> None:
    logs.store_chunks(chunks)
