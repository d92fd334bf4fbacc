"""On PostgreSQL a cycle reads only the waiting jobs written since its last read (cycle/waiting.py,
_changes_since), and misses none: not one written by a transaction that commits after the read
began, not one that left the queue, not one deleted."""

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from cycle import waiting
from jobs.models import Job
from jobs.services import create_job, stop_job, update_job_priority
from tests.agent.helpers import wait_for
from tests.jobs.conftest import make_request

pytestmark = [
    pytest.mark.django_db(transaction=True),  # real commits: the transaction ids are what is tested
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite reads every waiting job's version"),
]


@pytest.fixture
def reads(monkeypatch):
    """Per read: 'all' when it read every waiting job's version, else the rows of jobs written since."""
    seen = []
    versions, changes = waiting._versions, waiting._changes_since

    def all_versions():
        seen.append("all")
        return versions()

    def changes_since(xmin):
        rows, deletes, new_xmin = changes(xmin)
        seen.append(sorted(pk for pk, *_ in rows))
        return rows, deletes, new_xmin

    monkeypatch.setattr(waiting, "_versions", all_versions)
    monkeypatch.setattr(waiting, "_changes_since", changes_since)
    return seen


def settled() -> None:
    """Wait until every transaction that began before now has ended, in the whole PostgreSQL
    cluster: transaction ids are the cluster's, so another database's open transaction (a test run
    beside this one) holds a snapshot's xmin back, and a read then takes again what an earlier one
    took. That is right, only not what these tests count: they settle before each read."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text::bigint")  # autocommit: a transaction of its own
        mark = cursor.fetchone()[0]

        def older_ones_ended() -> bool:
            cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
            return cursor.fetchone()[0] > mark

        wait_for(older_ones_ended, timeout=60)


def priorities(read) -> dict[str, int]:
    return {job.job_id: job.priority for job in read}


def test_a_read_takes_only_the_jobs_written_since_the_last_one(bob, reads):
    jobs = [create_job(bob, make_request()) for _ in range(3)]
    waiting_jobs = waiting.WaitingJobs()
    settled()
    assert len(waiting_jobs.read()) == 3 and reads == ["all"]
    assert len(waiting_jobs.read()) == 3 and reads[1] == []  # nothing written since: no job row read

    update_job_priority(bob, jobs[0], 9)
    newer = create_job(bob, make_request())
    settled()
    read = waiting_jobs.read()
    assert reads[2] == sorted([jobs[0].pk, newer.pk])
    assert [j.job_id for j in read] == [j.job_id for j in (*jobs, newer)] and read[0].priority == 9

    stop_job(bob, jobs[1])  # leaves the queue: its row says so
    assert [j.job_id for j in waiting_jobs.read()] == [jobs[n].job_id for n in (0, 2)] + [newer.job_id]
    assert reads[3] == [jobs[1].pk] and "all" not in reads[1:]


def test_a_job_written_by_a_transaction_that_commits_after_a_read_began_is_read_next_time(bob, reads):
    job = create_job(bob, make_request())
    waiting_jobs = waiting.WaitingJobs()
    assert priorities(waiting_jobs.read()) == {job.job_id: job.priority}
    written, commit = threading.Event(), threading.Event()

    def slow_writer():  # its own connection; it stamps modified_at now and commits later
        try:
            with transaction.atomic():
                Job.objects.filter(pk=job.pk).update(priority=7, modified_at=timezone.now())
                written.set()
                assert commit.wait(10)
        finally:
            connection.close()

    writer = threading.Thread(target=slow_writer)
    writer.start()
    assert written.wait(10)
    assert priorities(waiting_jobs.read()) == {job.job_id: job.priority}  # not committed yet
    commit.set()
    writer.join(10)
    assert priorities(waiting_jobs.read()) == {job.job_id: 7}
    assert reads[0] == "all" and "all" not in reads[1:]


def test_a_deleted_waiting_job_makes_the_next_read_take_every_version(bob, reads):
    jobs = [create_job(bob, make_request()) for _ in range(2)]
    waiting_jobs = waiting.WaitingJobs()
    settled()
    assert len(waiting_jobs.read()) == 2
    Job.objects.filter(pk=jobs[0].pk).delete()  # a delete leaves no row with a transaction id to find
    assert [j.job_id for j in waiting_jobs.read()] == [jobs[1].job_id]
    assert reads == ["all", [], "all"] and waiting_jobs.pod_pks(jobs[0].job_id) == {}
