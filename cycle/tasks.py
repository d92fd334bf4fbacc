"""The schedule task, on queue 'scheduler': requested by name (jobs.cycle_requests) and by beat."""

from celery import shared_task

from cycle.schedule import ScheduleCycle
from jobs.cycle_requests import SCHEDULE_TASK

# This worker process's scheduler: it keeps the waiting jobs it read between cycles.
process_cycle = ScheduleCycle()


@shared_task(name=SCHEDULE_TASK, ignore_result=True)
def schedule() -> None:
    process_cycle.run_paced()
