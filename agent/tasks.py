"""The agent's Celery tasks: thin wrappers that hand each pod of the message to this process's executor.

Both return at once; the executor runs the pod in the background and reports through the outbox.
Each message is sealed for this agent (agent/auth.py): one that is not is refused and logged.
Only an agent process imports this module (`manage.py agent`); the platform sends these by name
(the contract is in jobs/dispatch.py).
"""

import logging

from celery import shared_task

from agent import auth, runtime

log = logging.getLogger(__name__)


def _opened(task: str, sealed) -> list:
    """The items of a message the platform sealed for this agent; [] (logged) for anything else."""
    try:
        return runtime.current().unseal(task, sealed)
    except auth.Refused as exc:
        log.warning("refused an %s message: %s", task, exc)
        return []


def _each(task: str, sealed, handle) -> None:
    """Hand each item of the message to the executor; one that fails must not keep the others of
    the batch from being handled."""
    for item in _opened(task, sealed):
        try:
            handle(runtime.current().executor, item)
        except Exception:
            log.exception("%s: could not handle pod %s", task, item.get("pod_id"))


@shared_task(name="agent.start_pods", ignore_result=True)
def start_pods(sealed: str) -> None:
    _each("agent.start_pods", sealed, lambda executor, spec: executor.start(spec))


@shared_task(name="agent.stop_pods", ignore_result=True)
def stop_pods(sealed: str) -> None:
    _each("agent.stop_pods", sealed, lambda executor, request: executor.stop(
        request["pod_id"], request.get("reason") or "Stopped", float(request.get("grace_s", 30))))


@shared_task(name="agent.resize_pods", ignore_result=True)
def resize_pods(sealed: str) -> None:
    _each("agent.resize_pods", sealed, lambda executor, update: executor.resize(update))
