"""bench/usage_page.py at a small scale: it fills the database and fetches the Usage page it times."""

import pytest

from bench import usage_page
from jobs.models import Job, Pod
from spot.models import DailyBill

pytestmark = pytest.mark.django_db


def test_the_usage_bench_stores_its_jobs_and_times_every_view_of_the_page():
    r = usage_page.run(jobs=300, repeat=1)

    assert Job.objects.count() == 300 and r["pods"] == Pod.objects.count() >= 300
    assert DailyBill.objects.exists() and Pod.objects.filter(sub_status="Evicted").exists()
    assert set(r["timings"]) == {"alice 7 days", "alice 30 days", "bob 7 days", "bob 30 days"}
    assert all(t["median_s"] > 0 for t in r["timings"].values())
    assert "/usage/ on" in usage_page.report(r) and "300 jobs" in usage_page.report(r)
