"""jobs_job keeps room on its pages (migration 0020): a waiting job's new reason and position, which
change no indexed column, are heap-only (HOT) updates that write none of the table's indexes."""

import pytest
from django.db import connection
from django.utils import timezone

from dbkit import bulk
from jobs.models import Job
from quotas.models import Membership

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's heap-only updates")


def updates_so_far() -> tuple[int, int]:
    """This transaction's updates of jobs_job rows: (all, heap-only)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'jobs_job'")
        return cursor.fetchone() or (0, 0)


def test_a_waiting_jobs_new_reason_and_position_are_written_without_touching_an_index(bob):
    workspace = Membership.objects.get(user=bob, is_default=True).workspace_id
    now = timezone.now()
    jobs = Job.objects.bulk_create(
        Job(job_id=f"dlchot{i:04d}", workspace_id=workspace, user=bob, display_name=f"train-{i}",
            user_command="python train.py", status="Queuing", submitted_at=now) for i in range(200))
    before = updates_so_far()
    # About one job a page, as a cycle rewrites the reasons that changed among many waiting jobs.
    rows = [("Waiting for quota nlp: 8 of 8 GPUs in use", "QuotaFull", n, job.pk) for n, job in enumerate(jobs[::10])]
    assert bulk.update_many(Job, ("wait_reason", "wait_reason_code", "queue_position"), ("id",), rows) == 20
    updated, heap_only = (after - then for after, then in zip(updates_so_far(), before))
    assert (updated, heap_only) == (20, 20)
