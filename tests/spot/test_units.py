"""market.units: every price a person reads is per hour, 4 places, labelled; the API keeps per node-minute."""

from decimal import Decimal

from market.units import from_hourly, hourly, per_hour


def test_a_price_per_node_minute_reads_per_hour_with_its_unit():
    assert hourly(Decimal("0.00825")) == "0.4950 /h"


def test_the_hourly_figure_rounds_half_up_to_four_places():
    assert per_hour(Decimal("0.0000025")) == Decimal("0.0002")


def test_no_price_reads_as_a_dash_not_as_zero():
    assert hourly(None) == "–"


def test_a_price_typed_per_hour_becomes_the_apis_per_minute():
    assert from_hourly(Decimal("0.495"), Decimal("0.000001")) == Decimal("0.008250")
