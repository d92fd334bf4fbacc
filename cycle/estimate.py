"""Estimated starts of the waiting jobs: the schedule cycle's snapshot run forward by tracesim.

The snapshot is the one a cycle reads (cycle/snapshot.py), with the whole queue instead of its
head; tracesim.forward runs the real scheduler.plan on it in virtual time, planning each cycle the
window a live cycle plans (cycle/waiting.py). What it assumes:

  * a running job ends when its maximum running time (JobMaxRunningTimeMinutes) runs out, counted
    from running_at as jobs.lifecycle.enforce_max_running_time counts it; without one, after its
    quota's typical run: the median run of the quota's jobs that finished in the last
    TYPICAL_DAYS (DEFAULT_RUN when none did; cycle/typical.py). A job already past that end ends now.
  * a waiting job, once started, runs as long by the same rule;
  * no job is submitted, stopped or fails meanwhile, and the spot prices stay where they are.

One estimate plans the whole queue many times over, so the console reads it from the cache, which
keeps it for CACHE_S: every page and every poll of that time shares one computation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.cache import cache
from django.utils import timezone

import scheduler
from cycle import snapshot, typical
from cycle.typical import DEFAULT_RUN, typical_runs
from cycle.waiting import WaitingJobs, plan_depth
from jobs.models import Job
from jobs.states import WAITING
from scheduler.plan import pool_type
from tracesim.forward import estimate_starts, queue_window

HORIZON = timedelta(days=7)
TYPICAL_DAYS = typical.TYPICAL_DAYS  # the job page says how far back a typical run looks
CACHE_S = 30
CACHE_KEY = "opendlc:estimated-starts"
CHUNK = 2000  # job ids per query (SQLite allows 32,766 parameters)


@dataclass(frozen=True)
class Estimate:
    """One waiting job's estimated start and what it rests on."""

    start: datetime | None  # None: not within the horizon
    computed_at: datetime
    horizon: timedelta
    quota: str | None  # the quota whose typical run the job itself is assumed to take
    typical_run: timedelta  # that quota's (or the pool jobs') typical run
    typical_from_history: bool  # False: DEFAULT_RUN, no job of it finished in TYPICAL_DAYS
    spot_price: Decimal | None  # spot: the price per minute assumed to hold


def estimates(now: datetime) -> dict[str, Estimate]:
    """job id -> estimated start of every waiting job that has a pod to place."""
    waiting = WaitingJobs()
    waiting.read()
    jobs = waiting.every_job()
    cluster = dataclasses.replace(snapshot.cluster(jobs), markets=snapshot.markets(now))
    typical = typical_runs(now)
    ends, limits = running_ends(cluster.pods, typical, now)
    durations = {j.job_id: limits.get(j.job_id) or typical.get(j.quota_id, (DEFAULT_RUN, False))[0] for j in jobs}
    forecast = estimate_starts(cluster, now, ends, durations, HORIZON, queue_window(plan_depth))
    prices = {m.instance_type: m.price for m in cluster.markets}
    return {job.job_id: Estimate(forecast.starts[job.job_id], now, HORIZON, job.quota_id,
                                 *typical.get(job.quota_id, (DEFAULT_RUN, False)), _spot_price(job, prices))
            for job in jobs}


def cached_estimates(now: datetime | None = None) -> dict[str, Estimate]:
    found = cache.get(CACHE_KEY)
    if found is None:
        found = estimates(now or timezone.now())
        cache.set(CACHE_KEY, found, CACHE_S)
    return found


def running_ends(pods: tuple[scheduler.RunningPod, ...], typical: dict, now: datetime
                 ) -> tuple[dict[str, datetime], dict[str, timedelta]]:
    """job id -> assumed end of each job holding pods; and job id -> maximum running time of
    every job that has one, waiting ones included (they run that long once started)."""
    rows = {}
    job_ids = sorted({p.job_id for p in pods})
    for i in range(0, len(job_ids), CHUNK):
        rows.update((job_id, rest) for job_id, *rest in Job.objects.filter(job_id__in=job_ids[i:i + CHUNK]).values_list(
            "job_id", "running_at", "max_running_time_minutes", "quota__name"))
    limits = {job_id: timedelta(minutes=m) for job_id, m in Job.objects.filter(
        status__in=WAITING, max_running_time_minutes__isnull=False).values_list(
        "job_id", "max_running_time_minutes")}
    ends = {}
    for job_id, (running_at, minutes, quota) in rows.items():
        run = timedelta(minutes=minutes) if minutes else typical.get(quota, (DEFAULT_RUN, False))[0]
        ends[job_id] = max(now, (running_at or now) + run)  # not yet running: its clock starts at Running
    return ends, limits


def _spot_price(job: scheduler.PendingJob, prices: dict[str, Decimal]) -> Decimal | None:
    if job.source != scheduler.SOURCE_SPOT:
        return None
    return prices.get(pool_type(job))
