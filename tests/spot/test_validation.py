import pytest

from spot.validation import spot_job_errors, spot_role_errors
from tests.spot.builders import A10, LINGJUN_TYPE

VPC = {"VpcId": "vpc-1", "SwitchId": "vsw-1", "SecurityGroupId": "sg-1"}


def role(instance_type=A10, **spot):
    return {"Type": "Worker", "PodCount": 1, "EcsSpec": instance_type,
            "SpotSpec": {"SpotStrategy": "SpotWithPriceLimit", **spot}}


def ecs(*roles, user_vpc=None):
    return spot_job_errors(roles, resource_type="ECS", user_vpc=user_vpc)


def lingjun(*roles, user_vpc=VPC):
    return spot_job_errors(roles, resource_type="Lingjun", user_vpc=user_vpc)


def only(errors):
    [error] = errors
    return error["field"], error["message"]


def test_it_accepts_the_discount_bid_of_the_sdk_example(demo_cluster):
    assert ecs(role("ecs.g7.xlarge", SpotDiscountLimit=0.4)) == []


def test_it_accepts_a_price_bid_within_the_market_range(demo_cluster):
    assert ecs(role(SpotPriceLimit=0.05)) == []  # A10: 0.0147 .. 0.147 per node-minute


def test_it_rejects_a_discount_off_the_grid_naming_the_field_and_the_allowed_values(demo_cluster):
    field, message = only(ecs(role(SpotDiscountLimit=0.95)))
    assert field == "JobSpecs[0].SpotSpec.SpotDiscountLimit"
    assert "0.1, 0.2, ... 0.9" in message


def test_it_rejects_a_price_limit_outside_the_market_range_and_shows_the_range(demo_cluster):
    field, message = only(ecs(role(SpotPriceLimit=0.2)))
    assert field == "JobSpecs[0].SpotSpec.SpotPriceLimit"
    assert "0.014700 to 0.147000" in message


def test_it_rejects_both_a_discount_and_a_price_limit(demo_cluster):
    field, message = only(ecs(role(SpotDiscountLimit=0.4, SpotPriceLimit=0.05)))
    assert field == "JobSpecs[0].SpotSpec"
    assert "exactly one of SpotDiscountLimit or SpotPriceLimit" in message


def test_it_rejects_a_bid_with_neither_limit(demo_cluster):
    field, message = only(ecs(role()))
    assert field == "JobSpecs[0].SpotSpec"
    assert "SpotDiscountLimit (0.1 to 0.9) or SpotPriceLimit" in message


def test_it_rejects_another_strategy(demo_cluster):
    errors = ecs({"EcsSpec": A10, "SpotSpec": {"SpotStrategy": "SpotAsPriceGo", "SpotDiscountLimit": 0.4}})
    field, message = only(errors)
    assert field == "JobSpecs[0].SpotSpec.SpotStrategy"
    assert "'SpotWithPriceLimit'" in message


def test_lingjun_accepts_only_discount_bids(demo_cluster):
    field, message = only(lingjun(role(LINGJUN_TYPE, SpotPriceLimit=1.0)))
    assert field == "JobSpecs[0].SpotSpec.SpotPriceLimit"
    assert "only discount bids" in message and "SpotDiscountLimit (0.1 to 0.9)" in message
    assert lingjun(role(LINGJUN_TYPE, SpotDiscountLimit=0.5)) == []


def test_a_lingjun_spot_job_needs_every_user_vpc_field_reported_once_for_all_roles(demo_cluster):
    errors = lingjun(role(LINGJUN_TYPE, SpotDiscountLimit=0.5), role(LINGJUN_TYPE, SpotDiscountLimit=0.5),
                     user_vpc={"VpcId": "vpc-1"})
    assert [e["field"] for e in errors] == ["UserVpc.SwitchId", "UserVpc.SecurityGroupId"]
    assert all("VpcId, SwitchId, SecurityGroupId" in e["message"] for e in errors)


def test_an_ecs_spot_job_needs_no_user_vpc(demo_cluster):
    assert ecs(role(SpotDiscountLimit=0.4), user_vpc=None) == []


@pytest.mark.parametrize("hours", [0, 1])
def test_the_protection_period_may_be_0_or_1_hour(demo_cluster, hours):
    assert ecs(role(SpotDiscountLimit=0.4, SpotDuration=hours)) == []


@pytest.mark.parametrize("hours", [2, -1, "1h", True])
def test_any_other_protection_period_is_rejected(demo_cluster, hours):
    field, message = only(ecs(role(SpotDiscountLimit=0.4, SpotDuration=hours)))
    assert field == "JobSpecs[0].SpotSpec.SpotDuration"
    assert "0 or 1 (hours)" in message


def test_errors_name_the_role_they_belong_to(demo_cluster):
    errors = ecs(role(SpotDiscountLimit=0.4), role(SpotDiscountLimit=0.45))
    assert [e["field"] for e in errors] == ["JobSpecs[1].SpotSpec.SpotDiscountLimit"]


def test_an_unknown_instance_type_lists_the_preemptible_types(demo_cluster):
    field, message = only(ecs(role("ecs.nope", SpotDiscountLimit=0.4)))
    assert field == "JobSpecs[0].EcsSpec"
    assert "ecs.g7.xlarge, ecs.gn6v-c8g1.16xlarge, ecs.gn7i-c8g1.2xlarge" in message


def test_a_lingjun_type_in_an_ecs_job_is_rejected(demo_cluster):
    field, message = only(ecs(role(LINGJUN_TYPE, SpotDiscountLimit=0.4)))
    assert field == "JobSpecs[0].EcsSpec"
    assert "is a Lingjun type, not ECS" in message


def test_a_type_without_a_public_pool_has_no_preemptible_resources(demo_cluster):
    from quotas.models import Node

    Node.objects.filter(spec__instance_type=A10, quota=None).delete()
    field, message = only(ecs(role(SpotDiscountLimit=0.4)))
    assert field == "JobSpecs[0].EcsSpec"
    assert message.startswith(f"{A10} has no preemptible resources (no public pool)")


def test_a_form_may_name_its_own_field_prefix(demo_cluster):
    errors = spot_role_errors(role(SpotDiscountLimit=0.95), index=0, resource_type="ECS", prefix="worker")
    assert [e["field"] for e in errors] == ["worker.SpotSpec.SpotDiscountLimit"]
