"""The hot queries read only the tables they name: a model's default ordering by a foreign key
(Pod's ["job", ...]) joined jobs_job into every query of pods to sort by the job's created_at."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from cycle.waiting import WaitingJobs
from jobs.models import Pod, PodLog


def test_pods_and_their_logs_are_ordered_without_a_join(db):
    for query in (Pod.objects.filter(pod_id__in=["a"]).values_list("pod_id", "job_id").query,
                  PodLog.objects.filter(pod_id=1).values_list("offset").query):
        sql = str(query)
        assert "JOIN" not in sql and "ORDER BY" in sql, sql


def test_a_cycle_reads_the_waiting_jobs_unsorted(db):
    with CaptureQueriesContext(connection) as queries:
        WaitingJobs().read()
    assert queries.captured_queries and not any("ORDER BY" in q["sql"] for q in queries.captured_queries)
