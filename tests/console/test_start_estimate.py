"""Estimated start of a waiting job (#28): cycle/estimate.py and what the job page and the list show."""

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from cycle import tasks as cycle_tasks
from cycle.estimate import estimates
from jobs.models import Job
from jobs.states import JobStatus
from tests.console.conftest import quota_job

pytestmark = pytest.mark.django_db
NOW = timezone.now().replace(microsecond=0) + timedelta(hours=1)  # after every submission


def running(job, minutes_limit=None):
    """The job admitted and Running since NOW, with this maximum running time."""
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, running_at=NOW, max_running_time_minutes=minutes_limit)


def finished_runs(user, *minutes):
    """Jobs of nlp-team that finished runs this long, a day before NOW: the quota's history."""
    for m in minutes:
        job = quota_job(user, f"done-{m}")
        Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, running_at=NOW - timedelta(days=1, minutes=m),
                                             finished_at=NOW - timedelta(days=1))


def busy_nlp_team(alice, first_limit=30, second_limit=None):
    """nlp-team's two V100 nodes each run a job, and two one-node jobs wait behind them."""
    first, second = quota_job(alice, "first"), quota_job(alice, "second")
    cycle_tasks.process_cycle.run(NOW)
    running(first, first_limit)
    running(second, second_limit)
    waiting = [quota_job(alice, "w1"), quota_job(alice, "w2")]
    cycle_tasks.process_cycle.run(NOW)
    return waiting


def test_running_jobs_end_at_their_maximum_running_time_else_after_their_quotas_median_run(alice):
    finished_runs(alice, 40, 50, 90)
    w1, w2 = busy_nlp_team(alice, first_limit=30)
    found = estimates(NOW)
    # first ends at its 30-minute limit, second after nlp-team's median run of 50 minutes.
    assert (found[w1.job_id].start, found[w2.job_id].start) == (NOW + timedelta(minutes=30), NOW + timedelta(minutes=50))
    assert found[w1.job_id].typical_run == timedelta(minutes=50) and found[w1.job_id].typical_from_history


def test_without_finished_jobs_a_quotas_typical_run_is_an_hour(alice):
    _, w2 = busy_nlp_team(alice, first_limit=30)
    found = estimates(NOW)
    assert found[w2.job_id].start == NOW + timedelta(minutes=60)
    assert not found[w2.job_id].typical_from_history


def test_the_job_page_and_the_list_show_the_estimate_with_its_assumptions(alice_client, alice, monkeypatch):
    finished_runs(alice, 40, 50, 90)
    w1, _ = busy_nlp_team(alice, first_limit=30)
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    page = alice_client.get(f"/jobs/{w1.job_id}/").content.decode()
    w1.refresh_from_db()
    assert f"(queue position {w1.queue_position}) · <span class=\"estimate\" title=\"" in page
    assert "starts in about 30 min (estimate)</span>" in page
    title = html.unescape(page.split('class="estimate" title="')[1].split('"')[0])
    assert "maximum running time (JobMaxRunningTimeMinutes)" in title
    assert "nlp-team: 50 min, the median run of quota nlp-team's jobs that finished in the last 14 days" in title
    listed = alice_client.get("/jobs/").content.decode()
    assert "starts in about 30 min (estimate)" in listed and f"queue position {w1.queue_position} · " in listed


def test_a_job_that_cannot_start_within_seven_days_says_so(alice_client, alice, monkeypatch):
    w1, _ = busy_nlp_team(alice, first_limit=8 * 24 * 60, second_limit=8 * 24 * 60)
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    assert estimates(NOW)[w1.job_id].start is None
    assert "not within 7 days (estimate)" in alice_client.get(f"/jobs/{w1.job_id}/").content.decode()


def test_a_job_that_will_start_at_the_next_cycle_says_within_a_minute_not_in_0_min(alice_client, alice, monkeypatch):
    quota_job(alice, "alone")  # nlp-team is free: the next cycle admits it
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    page = alice_client.get("/jobs/").content.decode()
    assert "starts within a minute (estimate)" in page and "about 0 min" not in page
