"""The agent's Celery tasks: thin wrappers that hand the message to this process's executor.

Both return at once; the executor runs the pod in the background and reports through the outbox.
Only an agent process imports this module (`manage.py agent`); the platform sends these by name.
"""

from celery import shared_task

from agent import runtime


@shared_task(name="agent.start_pod", ignore_result=True)
def start_pod(spec: dict) -> None:
    runtime.current().executor.start(spec)


@shared_task(name="agent.stop_pod", ignore_result=True)
def stop_pod(request: dict) -> None:
    runtime.current().executor.stop(request["pod_id"], request.get("reason") or "Stopped",
                                    float(request.get("grace_s", 30)))
