"""A Celery worker keeps its database connection from one task to the next (console/celery.py),
with Celery's own Django fixup installed as in a worker; one it cannot use is replaced."""

import pytest
from celery import signals
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from console.celery import app
from jobs.models import Job
from jobs.tasks import pod_reports

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="SQLite connections are closed after each task (CONN_MAX_AGE 0)")


@pytest.fixture
def worker_fixup(transactional_db, monkeypatch):
    """Celery's DjangoWorkerFixup, installed as a worker installs it at start, and the connection
    as console/config.py configures it (the test database's has CONN_MAX_AGE 0)."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    connection.close()  # the next query connects with it
    fixup = DjangoWorkerFixup(app)
    fixup.install()
    yield fixup
    for signal, handler in ((signals.task_prerun, fixup.on_task_prerun), (signals.task_postrun, fixup.on_task_postrun),
                            (signals.worker_process_init, fixup.on_worker_process_init),
                            (signals.beat_embedded_init, fixup.close_database)):
        signal.disconnect(handler)


def run_task() -> int:
    """What the worker does around a task: the signals, and a query in between. The server
    process's pid names the connection the task used."""
    task = pod_reports
    signals.task_prerun.send(sender=task, task_id="t", task=task, args=(), kwargs={})
    Job.objects.exists()
    pid = connection.connection.info.backend_pid
    signals.task_postrun.send(sender=task, task_id="t", task=task, args=(), kwargs={}, retval=None, state="SUCCESS")
    return pid


def test_tasks_share_one_connection(worker_fixup):
    pids = {run_task() for _ in range(5)}
    assert len(pids) == 1
    assert connection.connection is not None  # still open after the last task


def test_a_connection_broken_in_a_task_is_replaced_before_the_next(worker_fixup):
    first = run_task()
    connection.connection.close()  # as if the server went away
    connection.errors_occurred = True  # Django's wrapper marks a connection that raised
    second = run_task()
    assert second != first
    assert run_task() == second
