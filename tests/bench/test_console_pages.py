"""bench/console_pages.py at a small scale: it fills the database and times every page it names."""

import pytest

from bench import console_pages
from jobs.models import Job, Pod

pytestmark = pytest.mark.django_db


def test_the_console_pages_bench_times_each_page_for_staff_and_a_member():
    r = console_pages.run(jobs=200, repeat=1)

    assert Job.objects.count() == 200 and r["pods"] == Pod.objects.count() > 400  # three pods a job on average
    # The finished pods are rolled up, as the beat would have; the running ones are read from their rows.
    assert r["rolled"] == Pod.objects.filter(rolled_up=True).count() == Pod.objects.filter(finished_at__isnull=False).count()
    assert set(r["timings"]) == {"alice", "bob"}
    assert set(r["timings"]["bob"]) == {"jobs list", "jobs list, Running", "job detail", "quota tree", "usage, 7 days"}
    assert all(t["p95_s"] >= t["median_s"] > 0 for who in r["timings"].values() for t in who.values())
    assert "200 jobs" in console_pages.report(r)
