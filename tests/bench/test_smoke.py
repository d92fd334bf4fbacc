"""Each benchmark at a tiny scale through the real services (no timing asserts: bench/ prints those).

They start a scheduler worker, a platform worker and the simulated agent as subprocesses against the
test database and broker (SQLite + filesystem, or PostgreSQL + Redis), like the e2e tests.
"""

import pytest

from bench import admission_throughput, create_job, harness, kueue_baseline, reclaim_latency

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
def services(transactional_db, settings, tmp_path):
    with harness.Services.for_test(tmp_path, settings) as s:
        yield s


@pytest.mark.parametrize("shape", kueue_baseline.SHAPES)
def test_the_kueue_baseline_runs_every_job_to_completion_and_reports_each_class(services, shape):
    r = kueue_baseline.run(services, scale=0.02, cohorts=1, queues=2, timeout_s=180, shape=shape)

    assert (r["jobs"], r["succeeded"]) == (2 * (7 + 2 + 1), 2 * (7 + 2 + 1))
    assert (r["small_jobs"], r["medium_jobs"], r["large_jobs"]) == (14, 4, 2)
    assert r["wall_s"] >= r["bound_s"] > 0  # no run beats the work over the capacity
    assert 0 < r["work_pct"] <= r["usage_pct"] <= 100  # capacity held covers at least the run time
    assert all(r[f"{c}_s"] >= 0 for c in ("small", "medium", "large"))
    # the two phases split the run and its held capacity
    assert 0 < r["split_s"] < r["wall_s"] and 0 < r["backlog"] <= r["jobs"]
    assert 0 <= r["usage_submitting_pct"] <= 100 and 0 < r["usage_draining_pct"] <= 100
    assert r["usage_submitting_pct"] * r["split_s"] + r["usage_draining_pct"] * (r["wall_s"] - r["split_s"]) == \
        pytest.approx(r["usage_pct"] * r["wall_s"])
    assert "avg usage of nominal capacity" in kueue_baseline.report(r) and "drained in" in kueue_baseline.report(r)
    assert r["pods"] == {"pod": 2 * (7 + 2 + 1), "gang": 2 * (7 + 2 * 5 + 1 * 20)}[shape]  # first incarnations
    # per GPU, the held capacity splits into running, preempted runs and binding to start
    assert r["running_pct"] >= 0.99 * r["work_pct"] > 0  # each pod ran its run time (1 % for clock rounding)
    assert r["running_pct"] + r["preempted_run_pct"] + r["starting_pct"] == pytest.approx(r["usage_pct"])
    assert r["to_start_p50_s"] >= 0 and 0 <= r["gap_p50_s"] and r["gap_mean_s"] >= 0
    assert "per GPU: running" in kueue_baseline.report(r)
    assert r["busy_s"] > 0 and r["loop_s"] > 0 and "core-seconds per 1,000 jobs" in kueue_baseline.report(r)


def test_admission_throughput_binds_and_finishes_every_job(services):
    r = admission_throughput.run(services, jobs=30, nodes=10, duration_s=0.1, timeout_s=120)

    assert r["succeeded"] == 30
    assert r["cycles"] >= 3  # ten nodes take thirty jobs in at least three rounds
    assert r["admit_per_s"] > 0 and r["running_s"] >= r["bound_s"]
    assert "jobs/s" in admission_throughput.report(r)


def test_reclaim_latency_evicts_the_borrowers_in_every_trial(services):
    r = reclaim_latency.run(services, trials=3, nodes=2, grace_s=1, stop_s=0.2, timeout_s=60)

    assert r["evicted"] == 3 * 2
    assert r["p95_s"] >= r["p50_s"] >= 0.2  # the borrowers' termination is part of it
    assert r["p50_overhead_s"] == pytest.approx(r["p50_s"] - 0.2)
    assert "p95" in reclaim_latency.report(r)


def test_create_job_submits_every_job_and_reports_its_cost(db):
    from jobs.models import Job

    r = create_job.run(jobs=6, warm_up=3, cohorts=1, queues=2)

    assert Job.objects.count() == 9 and r["jobs"] == 6
    assert r["wall_ms"] > 0 and r["cpu_ms"] > 0 and (r["server_ms"] is None or r["server_ms"] >= 0)
    assert "ms a job" in create_job.report(r)
