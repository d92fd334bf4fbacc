import time
from datetime import timedelta
from decimal import Decimal

from spot.backfill import backfill_history
from spot.market_state import current_markets
from spot.models import PriceHistory
from spot.ticker import market_tick
from tests.spot.builders import A10, at

NOW = at(12, 3)
PUBLIC_TYPE_NAMES = ["ecs.g7.xlarge", "ecs.gn6v-c8g1.16xlarge", A10, "ml.gu7xf.c96m1600.8-gu108"]
PUBLIC_TYPES = len(PUBLIC_TYPE_NAMES)


def test_a_week_of_history_every_five_minutes_for_each_public_type(demo_cluster):
    began = time.perf_counter()
    written = backfill_history(days=7, now=NOW)
    print(f"backfill: {written} rows in {time.perf_counter() - began:.2f} s")
    assert written == PUBLIC_TYPES * 7 * 288
    rows = PriceHistory.objects.filter(spec__instance_type=A10).order_by("at")
    assert (rows.first().at, rows.last().at) == (NOW - timedelta(days=7) + timedelta(minutes=2), at(12, 0))
    on_demand = Decimal("0.147000")
    assert all(on_demand * Decimal("0.1") <= p <= on_demand for p in rows.values_list("price", flat=True))


def test_the_backfilled_curve_moves_with_the_days_and_differs_between_types(demo_cluster):
    backfill_history(days=7, now=NOW)
    a10 = list(PriceHistory.objects.filter(spec__instance_type=A10).values_list("price", flat=True))
    assert max(a10) > 2 * min(a10)  # afternoons are dearer than nights
    curves = {tuple(PriceHistory.objects.filter(spec__instance_type=t).values_list("ratio", flat=True))
              for t in PUBLIC_TYPE_NAMES}
    assert len(curves) == PUBLIC_TYPES


def test_backfilling_again_adds_nothing_and_the_live_tick_continues_from_it(demo_cluster):
    assert backfill_history(days=1, now=NOW) == PUBLIC_TYPES * 288
    assert backfill_history(days=1, now=NOW) == 0
    last = PriceHistory.objects.get(spec__instance_type=A10, at=at(12, 0))
    [row] = [r for r in market_tick(NOW) if r.spec.instance_type == A10]
    assert abs(row.ratio - last.ratio) <= Decimal("0.15") / 60 * 3  # three one-minute ticks later
    assert current_markets(NOW)[A10].price == row.price


def test_the_demo_seed_backfills_a_week_of_prices_once_it_commits(db, django_capture_on_commit_callbacks):
    from console import demo

    with django_capture_on_commit_callbacks(execute=True):
        demo.seed()
    assert PriceHistory.objects.filter(spec__instance_type=A10).count() == 7 * 288
    assert set(current_markets()) == set(PUBLIC_TYPE_NAMES)
