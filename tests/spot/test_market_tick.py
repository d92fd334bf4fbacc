from datetime import timedelta
from decimal import Decimal

import pytest

from jobs.models import PodKind, Source
from jobs.states import JobStatus
from quotas.models import Node, NodeStatus
from spot.models import PriceHistory
from spot.ticker import market_tick, replay_source
from tests.spot.builders import A10, at, make_job, public_nodes, run_pod, spec

PUBLIC_TYPES = ["ecs.g7.xlarge", "ecs.gn6v-c8g1.16xlarge", "ecs.gn7i-c8g1.2xlarge", "ml.gu7xf.c96m1600.8-gu108"]


def prices(instance_type=A10):
    return list(PriceHistory.objects.filter(spec__instance_type=instance_type).order_by("at").values_list("price", flat=True))


def tick_minutes(start, minutes):
    for n in range(minutes):
        market_tick(start + timedelta(minutes=n))


def test_a_tick_records_one_row_per_public_instance_type_inside_the_market_band(demo_cluster):
    rows = market_tick(at(10, 0, day=2) + timedelta(seconds=17))
    assert [r.spec.instance_type for r in rows] == PUBLIC_TYPES
    for row in rows:
        on_demand = row.spec.on_demand_price_per_minute
        assert row.at == at(10, 0)  # the tick's minute
        assert on_demand * Decimal("0.1") <= row.price <= on_demand
        assert row.stock_status == "WithStock"


def test_two_ticks_in_one_minute_write_one_row_per_type(demo_cluster):
    first = market_tick(at(10, 0))
    second = market_tick(at(10, 0) + timedelta(seconds=40))
    assert PriceHistory.objects.count() == len(PUBLIC_TYPES)
    assert [r.pk for r in first] == [r.pk for r in second]


def test_a_type_without_public_nodes_has_no_market(demo_cluster):
    Node.objects.filter(spec__instance_type="ecs.g7.xlarge", quota=None).delete()
    assert "ecs.g7.xlarge" not in {r.spec.instance_type for r in market_tick(at(10))}


def test_more_spot_demand_never_gives_a_lower_price_and_here_a_higher_one(demo_cluster):
    nodes = public_nodes(A10)
    run_pod(make_job(source=Source.PUBLIC, status=JobStatus.RUNNING), nodes[0], kind=PodKind.PAYG, started_at=at(9))
    tick_minutes(at(10), 90)
    calm = prices()

    PriceHistory.objects.all().delete()
    for node in nodes[1:4]:
        run_pod(make_job(status=JobStatus.RUNNING, discount=Decimal("0.9")), node, started_at=at(9))
    make_job(discount=Decimal("0.9"), pods=2)  # a bid that pays the price: queued demand
    tick_minutes(at(10), 90)
    busy = prices()

    assert all(b >= c for b, c in zip(busy, calm, strict=True))
    assert busy[-1] > calm[-1]


def test_bids_below_the_price_do_not_push_it_up(demo_cluster):
    for node in public_nodes(A10)[:3]:  # half the pool busy: the price stays above the floor
        run_pod(make_job(source=Source.PUBLIC, status=JobStatus.RUNNING), node, kind=PodKind.PAYG, started_at=at(9))
    tick_minutes(at(10), 30)
    alone = prices()
    assert min(alone) > Decimal("0.014700")
    PriceHistory.objects.all().delete()
    make_job(price_limit=Decimal("0.014700"), pods=3)  # a bid at the floor
    tick_minutes(at(10), 30)
    assert prices() == alone


def test_ready_nodes_only_are_supply_and_a_pool_without_them_is_without_stock(demo_cluster):
    Node.objects.filter(spec__instance_type=A10, quota=None).update(status=NodeStatus.NOT_READY)
    row = next(r for r in market_tick(at(10)) if r.spec.instance_type == A10)
    assert row.stock_status == "WithoutStock"
    assert row.utilization == 1.0  # an empty pool counts as full


def test_a_full_pool_closes_stock_to_new_spot_bids(demo_cluster):
    nodes = public_nodes(A10)
    for node in nodes[:5]:  # 6 nodes, 1 left free: that one is the pay-as-you-go reserve
        run_pod(make_job(source=Source.PUBLIC, status=JobStatus.RUNNING), node, kind=PodKind.PAYG, started_at=at(9))
    row = next(r for r in market_tick(at(10)) if r.spec.instance_type == A10)
    assert row.stock_status == "ClosedWithStock"
    assert row.utilization == pytest.approx(5 / 6)


def test_a_missed_minute_is_caught_up_at_the_engines_hourly_rate(demo_cluster):
    for node in public_nodes(A10):
        run_pod(make_job(source=Source.PUBLIC, status=JobStatus.RUNNING), node, kind=PodKind.PAYG, started_at=at(9))
    make_job(discount=Decimal("0.9"), pods=3)
    market_tick(at(10))
    market_tick(at(10, 30))  # the beat was down for 29 minutes
    tick_minutes(at(10, 1), 30)  # the same half hour, minute by minute, in a fresh history
    first, late = PriceHistory.objects.filter(spec__instance_type=A10, at__in=[at(10), at(10, 30)]).order_by("at")
    assert late.price > first.price
    assert late.ratio - first.ratio <= Decimal("0.15") / 2  # at most half the hourly move


def test_a_replay_follows_the_csv_as_a_ratio_of_each_on_demand_price(demo_cluster, settings, tmp_path):
    csv = tmp_path / "history.csv"
    csv.write_text(
        "snapshot_date,commit_time,commit,machine_type,accelerators,region,hour_ondemand_usd,hour_spot_usd\n"
        "2026-12-01,2026-12-01T00:00:00+00:00,c1,a2-highgpu-1g,a100=1,us-central1,4.00,2.00\n"
        "2026-12-02,2026-12-02T12:00:00+00:00,c2,a2-highgpu-1g,a100=1,us-central1,4.00,1.00\n"
        "2026-12-02,2026-12-02T12:00:00+00:00,c2,a2-highgpu-1g,a100=1,europe-west4,4.00,3.90\n"
    )
    settings.OPENDLC_PRICE_REPLAY = f"{csv}:a2-highgpu-1g:us-central1"
    market_tick(at(11, 59))
    market_tick(at(12, 0))
    market_tick(at(12, 1))
    assert prices(A10) == [Decimal("0.073500"), Decimal("0.036750"), Decimal("0.036750")]  # 0.147 x 0.5, x 0.25
    assert prices("ecs.g7.xlarge") == [Decimal("0.008250"), Decimal("0.004125"), Decimal("0.004125")]  # 0.0165 x 0.5, x 0.25


def test_a_replay_setting_must_name_path_machine_type_and_region():
    with pytest.raises(ValueError, match="path:machine_type:region"):
        replay_source("only-a-path.csv")


def test_a_price_row_keeps_the_engine_state_for_the_next_tick(demo_cluster):
    market_tick(at(10))
    row = PriceHistory.objects.get(spec=spec(A10), at=at(10))
    assert row.ratio is not None and row.smoothed_utilization is not None
    assert row.price == (row.ratio * spec(A10).on_demand_price_per_minute).quantize(Decimal("0.000001"))
