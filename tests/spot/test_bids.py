from decimal import Decimal

import pytest

from market.bids import bid_price, market_range, validate_spot_bid

ON_DEMAND = Decimal("12.5")
VPC = {"VpcId": "vpc-1", "SwitchId": "vsw-1", "SecurityGroupId": "sg-1"}


def errors(spec, resource_type="ECS", **kw):
    return validate_spot_bid(spec, resource_type=resource_type, on_demand_price=ON_DEMAND, **kw)


def fields(spec, resource_type="ECS", **kw):
    return [e["field"] for e in errors(spec, resource_type, **kw)]


def discount(value):
    return {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": value}


def price(value):
    return {"SpotStrategy": "SpotWithPriceLimit", "SpotPriceLimit": value}


@pytest.mark.parametrize("value", [0.1, 0.4, 0.9, "0.3", Decimal("0.50"), 0.7])
def test_it_accepts_a_discount_from_0_1_to_0_9_in_steps_of_0_1(value):
    assert errors(discount(value)) == []


@pytest.mark.parametrize("value", [0.95, 0.15, 1, 0, 0.0, -0.1, "abc", True, [0.4], float("nan"), 0.1 + 0.2])
def test_it_rejects_a_discount_off_the_0_1_grid_or_not_a_number(value):
    [error] = errors(discount(value))
    assert error["field"] == "SpotSpec.SpotDiscountLimit"
    assert "0.1, 0.2, ... 0.9" in error["message"]


@pytest.mark.parametrize("value", [1.25, "1.25", 5, Decimal("12.5"), 12.5])
def test_it_accepts_a_price_limit_within_the_market_range(value):
    assert errors(price(value)) == []


@pytest.mark.parametrize("value", [1.249999, 12.500001, 0, -3, "cheap", False])
def test_it_rejects_a_price_limit_outside_the_market_range_and_shows_the_range(value):
    [error] = errors(price(value))
    assert error["field"] == "SpotSpec.SpotPriceLimit"
    assert "1.250000 to 12.500000" in error["message"]


@pytest.mark.parametrize("strategy", [None, "NoSpot", "SpotAsPriceGo", "spotwithpricelimit"])
def test_it_rejects_any_strategy_but_spot_with_price_limit(strategy):
    [error] = errors({"SpotStrategy": strategy, "SpotDiscountLimit": 0.4})
    assert error["field"] == "SpotSpec.SpotStrategy"
    assert "'SpotWithPriceLimit'" in error["message"]


def test_it_rejects_a_bid_with_both_a_discount_and_a_price_limit():
    [error] = errors({"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.4, "SpotPriceLimit": 3})
    assert error["field"] == "SpotSpec"
    assert "exactly one of SpotDiscountLimit or SpotPriceLimit" in error["message"]


def test_it_rejects_a_bid_with_neither_a_discount_nor_a_price_limit():
    [error] = errors({"SpotStrategy": "SpotWithPriceLimit"})
    assert error["field"] == "SpotSpec"


def test_a_missing_spot_spec_names_the_strategy_and_the_limit():
    assert fields(None) == ["SpotSpec.SpotStrategy", "SpotSpec"]


def test_lingjun_accepts_a_discount_bid_with_a_full_user_vpc():
    assert errors(discount(0.4), "Lingjun", user_vpc=VPC) == []


def test_lingjun_rejects_a_price_limit_bid_and_points_to_the_discount():
    [error] = errors(price(5), "Lingjun", user_vpc=VPC)
    assert error["field"] == "SpotSpec.SpotPriceLimit"
    assert "only discount bids" in error["message"] and "SpotDiscountLimit" in error["message"]


def test_lingjun_names_each_missing_part_of_the_user_vpc():
    assert fields(discount(0.4), "Lingjun", user_vpc={"VpcId": "vpc-1", "SwitchId": ""}) == [
        "UserVpc.SwitchId",
        "UserVpc.SecurityGroupId",
    ]
    assert fields(discount(0.4), "Lingjun") == ["UserVpc.VpcId", "UserVpc.SwitchId", "UserVpc.SecurityGroupId"]


def test_ecs_spot_jobs_need_no_user_vpc():
    assert errors(discount(0.4), "ECS", user_vpc=None) == []


@pytest.mark.parametrize("duration", [None, 0, 1])
def test_it_accepts_a_protection_period_of_0_or_1_hour(duration):
    assert errors(discount(0.4), spot_duration=duration) == []


@pytest.mark.parametrize("duration", [2, -1, 0.5, "1", True])
def test_it_rejects_any_other_protection_period(duration):
    [error] = errors(discount(0.4), spot_duration=duration)
    assert error["field"] == "SpotDuration"
    assert "0 or 1" in error["message"]


def test_it_reports_every_problem_at_once():
    spec = {"SpotStrategy": "Other", "SpotPriceLimit": 5}
    assert fields(spec, "Lingjun", spot_duration=3) == [
        "SpotSpec.SpotStrategy",
        "SpotSpec.SpotPriceLimit",
        "UserVpc.VpcId",
        "UserVpc.SwitchId",
        "UserVpc.SecurityGroupId",
        "SpotDuration",
    ]


def test_an_unknown_resource_type_is_a_programming_error():
    with pytest.raises(ValueError):
        errors(discount(0.4), "GPU")


def test_the_market_range_is_10_percent_to_100_percent_of_on_demand():
    assert market_range(Decimal("3.673385")) == (Decimal("0.367339"), Decimal("3.673385"))


def test_a_discount_bid_is_the_discount_times_the_on_demand_price():
    assert bid_price(Decimal("3.673385"), discount=0.4) == Decimal("1.469354")  # 1.469354 exactly
    assert bid_price(Decimal("3.673385"), discount=0.3) == Decimal("1.102016")  # 1.1020155 rounds up


def test_a_price_limit_bid_is_the_price_limit():
    assert bid_price(Decimal("12.5"), price_limit=0.011) == Decimal("0.011000")


def test_a_bid_needs_exactly_one_of_discount_or_price_limit():
    with pytest.raises(ValueError):
        bid_price(ON_DEMAND)
    with pytest.raises(ValueError):
        bid_price(ON_DEMAND, discount=0.4, price_limit=1)

