"""The spot discount (price / on-demand) has one home, market.engine.spot_discount: ListEcsSpecs'
NonProtectSpotDiscount, GetSpotPriceHistory's SpotDiscount, the spec picker's offers and the
History Price points give the same figure, rounded one way."""

from decimal import Decimal

from api.spot import _ecs_spec, history_items, spot_market
from market.engine import spot_discount
from quotas.models import ResourceSpec
from spot.market_state import price_history, spot_offers
from tests.spot.builders import at, price_row

V100 = "ecs.gn6v-c8g1.16xlarge"


def test_every_face_shows_one_discount_for_a_price_that_needs_rounding(demo_cluster):
    # 1.000001 / 2 = 0.5000005: half up 0.500001, half even 0.500000.
    ResourceSpec.objects.filter(instance_type=V100).update(on_demand_price_per_minute=Decimal("2"))
    price_row(at(11), "1.000001", V100)
    spec = ResourceSpec.objects.get(instance_type=V100)
    one = spot_discount(Decimal("1.000001"), Decimal("2"))
    assert one == Decimal("0.500001")

    [offer] = [o for o in spot_offers(at(12)) if o.instance_type == V100]
    [point] = price_history(V100, at(10), at(12))
    [item] = history_items(spec, spec.price_history.all())
    assert offer.spot_discount == point.spot_discount == one
    assert _ecs_spec(spec, spot_market([spec])[spec.pk])["NonProtectSpotDiscount"] == float(one)
    assert item["SpotDiscount"] == float(one)
