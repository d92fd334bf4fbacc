"""Writing many rows in a few statements, for the paths that handle thousands of jobs at once
(the schedule cycle's admissions, a batch of pod reports)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from jobs.models import Job, JobEvent, StatusTransition
from jobs.states import JobStatus, check_transition


def update_many(model, columns: tuple[str, ...], keys: tuple[str, ...], rows: list[tuple],
                extra_where: str = "") -> int:
    """UPDATE model SET columns WHERE keys (and extra_where), once per row; returns rows changed.

    One plain statement run many times: bulk_update's CASE over thousands of rows costs far more
    to build than the statements cost to run. Values are prepared by the model's fields.
    """
    if not rows:
        return 0
    meta, q = model._meta, connection.ops.quote_name
    fields = [meta.get_field(name) for name in columns + keys]
    sql = (f"UPDATE {q(meta.db_table)} SET {', '.join(f'{q(f.column)} = %s' for f in fields[:len(columns)])} "
           f"WHERE {' AND '.join(f'{q(f.column)} = %s' for f in fields[len(columns):])}"
           + (f" AND {extra_where}" if extra_where else ""))
    params = [[f.get_db_prep_save(v, connection) for f, v in zip(fields, row)] for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
        return cursor.rowcount


@dataclass(frozen=True)
class Transition:
    job: Job
    previous: str
    status: str
    reason: str
    message: str
    at: datetime


def transition(job: Job, target: str, *, reason: str, message: str, at: datetime) -> Transition:
    """Job.transition on the instance only (checked, timestamps set): save it and record the
    returned Transition with `record`, for many jobs at once."""
    check_transition(job.status, target)
    previous, job.status = job.status, target
    job.reason_code, job.reason_message = reason, message
    if target == JobStatus.RUNNING and job.running_at is None:
        job.running_at = at
    if target in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        job.finished_at = at
    return Transition(job, previous, target, reason, message, at)


def record(transitions: list[Transition]) -> None:
    """The status history and event Job.transition writes, for many transitions in two inserts."""
    StatusTransition.objects.bulk_create(
        StatusTransition(job=t.job, previous=t.previous, status=t.status, reason=t.reason, message=t.message,
                         at=t.at) for t in transitions)
    JobEvent.objects.bulk_create(
        JobEvent(job=t.job, at=t.at, reason=t.reason or t.status,
                 type=JobEvent.Type.WARNING if t.status in (JobStatus.FAILED, JobStatus.RESTARTING)
                 else JobEvent.Type.NORMAL,
                 message=t.message or f"Job status changed from {t.previous} to {t.status}")
        for t in transitions)
