from decimal import Decimal
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from market.engine import (
    CEILING, FLOOR, MarketParams, MarketState, PoolObservation, average_price, initial_state,
    market_price, noise, queued_demand, step, target_ratio, tick_of, time_of, utilization,
)

counts = st.integers(min_value=0, max_value=200)
ratios = st.decimals(min_value=FLOOR, max_value=CEILING, places=6)
smoothed = st.floats(min_value=0.0, max_value=2.0)


def run(pool, demands, capacity=100, params=MarketParams(), start=0):
    """Ratios of a pool fed demand per tick (beyond capacity it queues), starting empty at the floor."""
    state, series = initial_state(params=params), []
    for i, demand in enumerate(demands):
        obs = PoolObservation(capacity, payg_in_use=min(demand, capacity), spot_queued=max(demand - capacity, 0))
        state = step(state, obs, start + i, pool=pool, params=params)
        series.append(state.ratio)
    return series


def test_utilization_counts_payg_spot_in_use_and_spot_queued():
    assert utilization(PoolObservation(capacity=10, payg_in_use=2, spot_in_use=3, spot_queued=4)) == 0.9


def test_an_empty_pool_counts_as_fully_used():
    assert utilization(PoolObservation(capacity=0, spot_queued=1)) == 1.0


def test_the_target_runs_from_the_floor_at_idle_to_on_demand_at_saturation():
    assert target_ratio(0.0) == 0.1
    assert abs(target_ratio(1.2) - 1.0) < 1e-12
    assert target_ratio(3.0) == target_ratio(1.2)


def test_an_exactly_full_pool_stays_below_every_discount_bids_reach():
    # r*(1.0) ~ 0.79: a pool full of spot does not price out all of its own 0.8 and 0.9 bids
    assert 0.7 < target_ratio(1.0) < 0.8


def test_only_queued_bids_that_pay_the_current_price_count_as_demand():
    bids = [(Decimal("3.0"), 4), (Decimal("2.5"), 2), (Decimal("0.5"), 8)]
    assert queued_demand(bids, Decimal("2.5")) == 6
    assert queued_demand(bids, Decimal("3.000001")) == 0


@settings(max_examples=200, deadline=None)
@given(ratio=ratios, u=smoothed, payg=counts, spot=counts, queued=counts, tick=st.integers(0, 10**8))
def test_the_price_never_leaves_10_to_100_percent_of_on_demand(ratio, u, payg, spot, queued, tick):
    state = step(MarketState(u, ratio), PoolObservation(100, payg, spot, queued), tick, pool="p")
    assert FLOOR <= state.ratio <= CEILING


@settings(max_examples=200, deadline=None)
@given(ratio=ratios, u=smoothed, payg=counts, spot=counts, queued=counts, more=st.integers(1, 50),
       which=st.sampled_from(["payg_in_use", "spot_in_use", "spot_queued"]), tick=st.integers(0, 10**8))
def test_more_demand_never_lowers_the_price(ratio, u, payg, spot, queued, more, which, tick):
    state = MarketState(u, ratio)
    obs = PoolObservation(100, payg, spot, queued)
    busier = PoolObservation(**{**obs.__dict__, which: getattr(obs, which) + more})
    assert step(state, busier, tick, pool="p").ratio >= step(state, obs, tick, pool="p").ratio
    assert step(state, busier, tick, pool="p").smoothed_u > step(state, obs, tick, pool="p").smoothed_u


@settings(max_examples=200, deadline=None)
@given(low=st.floats(0.0, 2.0), high=st.floats(0.0, 2.0))
def test_the_target_is_monotone_in_utilization(low, high):
    low, high = sorted((low, high))
    assert target_ratio(low) <= target_ratio(high)


def test_excess_demand_drives_the_price_to_on_demand_and_an_idle_pool_back_down():
    series = run("p", [130] * 1440 + [0] * 1440)
    assert max(series) > Decimal("0.95")
    assert series[-1] < Decimal("0.15")


def test_the_price_moves_at_most_the_hourly_limit_in_any_hour():
    params = MarketParams(max_move_per_hour=Decimal("0.15"))
    series = run("p", [130] * 600 + [0] * 600 + [130] * 600, params=params)
    moves = [abs(series[i + 60] - series[i]) for i in range(len(series) - 60)]
    assert max(moves) <= Decimal("0.15")
    assert max(moves) > Decimal("0.14")  # the limit is what binds, not something slower


def test_each_tick_moves_at_most_its_share_of_the_hourly_limit():
    params = MarketParams(tick_minutes=5, max_move_per_hour=Decimal("0.12"))
    series = run("p", [130] * 200, params=params)
    steps = [abs(b - a) for a, b in pairwise(series)]
    assert max(steps) == Decimal("0.01")


def test_the_same_inputs_give_the_same_series():
    demands = [(i * 7) % 100 for i in range(500)]
    assert run("ecs.gn7-a100", demands) == run("ecs.gn7-a100", demands)


def test_different_pools_get_different_noise_from_the_same_demand():
    demands = [50] * 300
    assert run("ecs.gn7-a100", demands) != run("ecs.gn6v-v100", demands)
    assert noise("ecs.gn7-a100", 5, 0.01) != noise("ecs.gn6v-v100", 5, 0.01)


def test_noise_is_bounded_and_depends_on_the_tick():
    values = [noise("p", t, 0.002) for t in range(2000)]
    assert all(-0.002 <= v <= 0.002 for v in values)
    assert len(set(values)) == 2000
    assert min(values) < -0.0018 and max(values) > 0.0018


def test_without_noise_a_steady_pool_settles_on_its_target():
    params = MarketParams(noise=0.0)
    series = run("p", [85] * 3000, params=params)
    assert abs(float(series[-1]) - target_ratio(0.85, params)) < 1e-6


def test_the_market_price_is_the_ratio_of_the_on_demand_price_to_six_places():
    assert market_price(Decimal("0.333333"), Decimal("10")) == Decimal("3.333330")
    assert market_price(Decimal("0.05"), Decimal("10")) == Decimal("1.000000")  # clamped


def test_the_average_price_is_the_mean_rounded_to_six_places():
    assert average_price([Decimal("1"), Decimal("2"), Decimal("2")]) == Decimal("1.666667")


def test_ticks_count_whole_minutes_since_the_epoch():
    at = time_of(29_000_000)
    assert tick_of(at) == 29_000_000
    assert tick_of(at.replace(second=59)) == 29_000_000
    assert tick_of(time_of(100, MarketParams(tick_minutes=5)), MarketParams(tick_minutes=5)) == 100


def test_a_tick_length_must_divide_an_hour():
    with pytest.raises(ValueError, match="divide an hour"):
        MarketParams(tick_minutes=7)
