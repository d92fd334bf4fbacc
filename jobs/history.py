"""A job's status history written for many jobs at once: Job.transition's checks on the
instance, and its StatusTransition and JobEvent rows inserted in one statement (dbkit.bulk)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from dbkit.bulk import Insert, insert_rows
from jobs.dispatch import EVICTING_REASONS
from jobs.models import Job, JobEvent, StatusTransition
from jobs.states import JobStatus, check_transition

# Sent by `record` with transitions=[Transition, ...], inside the transaction that writes them: the
# one place every status change passes, so that an app above jobs (notify) can act on them without
# jobs importing it. A receiver must be cheap: the scheduler records thousands at once.
transitions_recorded = Signal()


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


def record(transitions: list[Transition], *more: Insert) -> None:
    """The status history and event Job.transition writes, for many transitions, and `more` rows
    (insert_rows), in one statement on PostgreSQL."""
    insert_rows(*history_inserts(transitions), *more)
    if transitions:
        transitions_recorded.send(Transition, transitions=transitions)


def history_inserts(transitions: list[Transition]) -> tuple[Insert, Insert]:
    return (Insert(StatusTransition, ("job", "previous", "status", "reason", "message", "at"),
                   [(t.job.pk, t.previous, t.status, t.reason, t.message, t.at) for t in transitions]),
            Insert(JobEvent, ("job", "at", "type", "reason", "message"),
                   [(t.job.pk, t.at, _event_type(t), _event_reason(t), _event_message(t)) for t in transitions]))


def history_rows(transitions: list[Transition]) -> tuple[list[StatusTransition], list[JobEvent]]:
    """The unsaved StatusTransition and JobEvent rows that record `transitions` (as `record` writes
    them), for a caller that inserts them with other rows."""
    return ([StatusTransition(job=t.job, previous=t.previous, status=t.status, reason=t.reason, message=t.message,
                              at=t.at) for t in transitions],
            [JobEvent(job=t.job, at=t.at, reason=_event_reason(t), type=_event_type(t), message=_event_message(t))
             for t in transitions])


def _event_type(t: Transition) -> str:
    return JobEvent.Type.WARNING if t.status in (JobStatus.FAILED, JobStatus.RESTARTING) else JobEvent.Type.NORMAL


def _event_reason(t: Transition) -> str:
    # The eviction itself got its event when it was decided (cycle.apply, jobs.nodes): the job's
    # end that follows is its failure, not a second "Preempted". The status keeps PAI's reason.
    if t.status == JobStatus.FAILED and t.reason in EVICTING_REASONS:
        return "JobFailed"
    return t.reason or t.status


def _event_message(t: Transition) -> str:
    return t.message or f"Job status changed from {t.previous} to {t.status}"


@transaction.atomic
def change_status(job: Job, target: str, *, reason: str = "", message: str = "", now=None) -> None:
    """Move one job to `target`, saving it and recording its history and an event. Raises
    IllegalTransition."""
    step = transition(job, target, reason=reason, message=message, at=now or timezone.now())
    job.save()
    record([step])
