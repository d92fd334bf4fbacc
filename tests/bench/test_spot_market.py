"""bench/spot_market.py at a small scale: its fleet day runs through the real scheduler.plan."""

from datetime import timedelta
from unittest import mock

from bench import spot_market


def test_the_fleet_day_is_decided_by_scheduler_plan_and_prints_its_figures(capsys):
    with mock.patch.object(spot_market, "plan", wraps=spot_market.plan) as plan:
        spot_market.report_fleet(seed=7, count=12, capacity=16)
    out = capsys.readouterr().out
    assert plan.call_count >= spot_market.DAY  # at least one cycle a minute
    assert f"({plan.call_count} cycles of scheduler.plan" in out
    assert "finished" in out and "times outbid" in out and "savings" in out


def test_no_spot_job_is_released_inside_its_protection_period_nor_runs_twice_at_once():
    day = spot_market.simulate(seed=7, count=30, capacity=16)
    for job in day.jobs:
        for (start, end), (later, _) in zip(job.intervals, job.intervals[1:]):
            assert end - start >= timedelta(minutes=job.protection)  # released, not finished
            assert later >= end
        worked = sum((end - start for start, end in job.intervals), timedelta())
        assert worked <= timedelta(minutes=240)  # the longest job of the fleet


def test_the_pool_never_runs_more_spot_than_it_has_nodes():
    day = spot_market.simulate(seed=3, count=40, capacity=8)
    for minute in range(spot_market.DAY):
        now = spot_market.at(minute)
        running = sum(j.nodes for j in day.jobs for start, end in j.intervals if start <= now < end)
        assert running <= 8
