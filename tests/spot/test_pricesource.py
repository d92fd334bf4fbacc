from decimal import Decimal
from pathlib import Path

import pytest

from market.engine import MarketState, PoolObservation, initial_state, step, tick_of
from market.pricesource import (
    ChangePoint, ModelPriceSource, PriceSource, ReplayPriceSource, load_gcp_history,
)

REAL_HISTORY = Path(__file__).resolve().parents[3] / "shared" / "data" / "gcp_gpu_spot_price_history.csv"
HEADER = "snapshot_date,commit_time,commit,machine_type,accelerators,region,hour_ondemand_usd,hour_spot_usd\n"


@pytest.fixture
def tiny_history(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text(
        HEADER
        + "2024-01-01,2024-01-01T00:00:00+00:00,a,a2-highgpu-1g,a100=1,us-central1,4.0,2.0\n"
        + "2024-01-01,2024-01-01T00:00:00+00:00,a,a2-highgpu-1g,a100=1,europe-west4,4.0,3.0\n"
        + "2024-01-01,2024-01-01T00:00:00+00:00,a,g2-standard-4,l4=1,us-central1,1.0,0.9\n"
        # +02:00: this row is 2024-01-01T23:00Z, before the next one in file order
        + "2024-01-03,2024-01-03T00:00:00+00:00,b,a2-highgpu-1g,a100=1,us-central1,4.0,1.0\n"
        + "2024-01-02,2024-01-02T01:00:00+02:00,c,a2-highgpu-1g,a100=1,us-central1,4.0,3.0\n"
        + "2024-01-04,2024-01-04T00:00:00+00:00,d,a2-highgpu-1g,a100=1,us-central1,4.0,1.0\n"
        + "2024-01-05,2024-01-05T00:00:00+00:00,e,a2-highgpu-1g,a100=1,us-central1,4.0,0.2\n"
    )
    return path


def day_tick(day):
    from datetime import datetime, timezone

    return tick_of(datetime(2024, 1, day, tzinfo=timezone.utc))


def test_the_history_keeps_one_machine_type_and_region_in_time_order_without_repeats(tiny_history):
    points = load_gcp_history(tiny_history, "a2-highgpu-1g", "us-central1")
    assert points == [
        ChangePoint(day_tick(1), Decimal("0.5")),
        ChangePoint(day_tick(1) + 23 * 60, Decimal("0.75")),
        ChangePoint(day_tick(3), Decimal("0.25")),
        ChangePoint(day_tick(5), Decimal("0.1")),  # 0.05 clamped to the market floor
    ]


def test_a_replay_holds_each_ratio_until_the_next_change_point(tiny_history):
    points = load_gcp_history(tiny_history, "a2-highgpu-1g", "us-central1")
    replay = ReplayPriceSource(points, start_tick=1000)
    second = 1000 + 23 * 60
    assert replay.ratio_at(1000) == Decimal("0.5")
    assert replay.ratio_at(second - 1) == Decimal("0.5")
    assert replay.ratio_at(second) == Decimal("0.75")
    assert replay.ratio_at(1000 + 2 * 1440 - 1) == Decimal("0.75")
    assert replay.ratio_at(1000 + 2 * 1440) == Decimal("0.25")


def test_a_replay_holds_the_first_ratio_before_and_the_last_after_the_history(tiny_history):
    replay = ReplayPriceSource(load_gcp_history(tiny_history, "a2-highgpu-1g", "us-central1"), start_tick=1000)
    assert replay.ratio_at(0) == Decimal("0.5")
    assert replay.ratio_at(10**9) == Decimal("0.1")


def test_a_looping_replay_starts_over_after_its_last_change_point(tiny_history):
    points = load_gcp_history(tiny_history, "a2-highgpu-1g", "us-central1")
    replay = ReplayPriceSource(points, start_tick=0, loop=True)
    # 4 points over 4 days: the last ratio holds the mean gap, 4 days / 3 = 1920 minutes
    period = 4 * 1440 + 1920
    assert replay.ratio_at(4 * 1440) == Decimal("0.1")
    assert replay.ratio_at(period - 1) == Decimal("0.1")
    assert replay.ratio_at(period) == Decimal("0.5")
    assert replay.ratio_at(period + 23 * 60) == Decimal("0.75")


def test_a_faster_replay_covers_a_history_day_per_minute(tiny_history):
    replay = ReplayPriceSource(load_gcp_history(tiny_history, "a2-highgpu-1g", "us-central1"), start_tick=0, speed=1440)
    assert [replay.ratio_at(t) for t in range(5)] == [Decimal(x) for x in ("0.5", "0.75", "0.25", "0.25", "0.1")]


def test_a_replay_ignores_demand_but_still_smooths_utilization(tiny_history):
    replay = ReplayPriceSource(load_gcp_history(tiny_history, "a2-highgpu-1g", "us-central1"), start_tick=0)
    state = replay.advance(MarketState(0.0, Decimal("0.9")), PoolObservation(10, payg_in_use=10), 0)
    assert state.ratio == Decimal("0.5")
    assert 0.0 < state.smoothed_u < 1.0


def test_the_model_source_is_the_market_step_of_its_pool():
    source: PriceSource = ModelPriceSource("ecs.gn7")
    obs = PoolObservation(10, payg_in_use=9)
    assert source.advance(initial_state(), obs, 7) == step(initial_state(), obs, 7, pool="ecs.gn7")


def test_a_replay_needs_a_change_point():
    with pytest.raises(ValueError):
        ReplayPriceSource([], start_tick=0)


@pytest.mark.skipif(not REAL_HISTORY.exists(), reason="shared GCP price history not present")
def test_the_real_gcp_history_replays_inside_the_market_band():
    points = load_gcp_history(REAL_HISTORY, "a3-highgpu-8g", "us-central1")
    assert len(points) > 5
    assert [p.tick for p in points] == sorted(p.tick for p in points)
    assert all(Decimal("0.1") <= p.ratio <= Decimal("1.0") for p in points)
    # First row: 61.94814684 spot / 87.832465656 on-demand on 2024-05-17.
    assert points[0].ratio == Decimal("0.705299")
    assert ReplayPriceSource(points, start_tick=0).ratio_at(0) == Decimal("0.705299")
