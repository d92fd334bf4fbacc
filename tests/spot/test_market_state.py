from datetime import timedelta
from decimal import Decimal

from jobs.models import PodKind, Source
from jobs.states import JobStatus
from spot.market_state import Market, current_markets, spot_offers
from tests.spot.builders import A10, LINGJUN_TYPE, at, make_job, price_row, public_nodes, run_pod


def test_current_markets_give_the_latest_price_and_the_minute_weighted_hour_average(demo_cluster):
    now = at(12, 0)
    price_row(now - timedelta(minutes=90), "0.050000")
    price_row(now - timedelta(minutes=30), "0.080000")
    price_row(now + timedelta(minutes=1), "0.140000")  # the future is not read
    market = current_markets(now)[A10]
    # The hour is the 60 minutes 11:01 .. 12:00: 11:01-11:29 hold 0.05 (29 minutes), 11:30-12:00
    # hold 0.08 (31 minutes): (29 x 0.05 + 31 x 0.08) / 60 = (1.45 + 2.48) / 60 = 0.0655
    assert market == Market(Decimal("0.080000"), Decimal("0.065500"), "WithStock")
    price, avg, stock = market  # unpacks as a tuple too
    assert (price, avg, stock) == (market.price, market.avg_last_hour, market.stock_status)


def test_a_first_price_inside_the_hour_averages_only_the_minutes_since(demo_cluster):
    now = at(12, 0)
    price_row(now - timedelta(minutes=9), "0.100000")
    price_row(now - timedelta(minutes=4), "0.040000")
    # 11:51-11:55 at 0.10 (5 minutes), 11:56-12:00 at 0.04 (5 minutes): 0.70 / 10 = 0.07
    assert current_markets(now)[A10].avg_last_hour == Decimal("0.070000")


def test_a_type_with_a_public_pool_but_no_price_yet_has_no_market(demo_cluster):
    price_row(at(11), "0.050000")
    assert list(current_markets(at(12))) == [A10]


def test_current_markets_report_stock_from_the_pool_now(demo_cluster):
    price_row(at(11), "0.500000", LINGJUN_TYPE)
    first, second = public_nodes(LINGJUN_TYPE)
    run_pod(make_job(source=Source.PUBLIC, status=JobStatus.RUNNING, instance_type=LINGJUN_TYPE),
            first, kind=PodKind.PAYG, started_at=at(10))
    assert current_markets(at(12))[LINGJUN_TYPE].stock_status == "ClosedWithStock"  # the last node is the reserve
    run_pod(make_job(status=JobStatus.RUNNING, instance_type=LINGJUN_TYPE, discount=Decimal("0.5")),
            second, started_at=at(10))
    assert current_markets(at(12))[LINGJUN_TYPE].stock_status == "WithoutStock"


def test_spot_offers_list_every_type_with_on_demand_price_market_price_and_discount(demo_cluster):
    price_row(at(11), "0.036750")  # a quarter of 0.147
    offers = {o.instance_type: o for o in spot_offers(at(12))}
    a10 = offers[A10]
    assert (a10.on_demand_price, a10.price, a10.spot_discount, a10.stock_status) == (
        Decimal("0.147000"), Decimal("0.036750"), Decimal("0.250000"), "WithStock")
    assert (a10.on_demand_price_per_hour, a10.price_per_hour) == (Decimal("8.820000"), Decimal("2.205000"))
    assert a10.market_range == (Decimal("0.014700"), Decimal("0.147000"))
    no_price = offers["ecs.g7.xlarge"]
    assert (no_price.price, no_price.spot_discount, no_price.stock_status) == (None, None, "WithoutStock")
    assert len(offers) == 4


def test_the_price_history_of_a_type_gives_prices_and_discounts_in_a_window(demo_cluster):
    from spot.market_state import PricePoint, price_history

    price_row(at(10), "0.073500")
    price_row(at(11), "0.036750")
    price_row(at(12), "0.147000")
    assert price_history(A10, at(10, 30), at(12)) == [
        PricePoint(at(11), Decimal("0.036750"), Decimal("0.250000")),
        PricePoint(at(12), Decimal("0.147000"), Decimal("1.000000")),
    ]
