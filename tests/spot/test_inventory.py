import pytest

from market.inventory import (
    CLOSED_WITH_STOCK, WITH_STOCK, WITHOUT_STOCK, reserve, spot_shortage, stock_status,
)

# Pool of 20 units, default reserve 10 % = 2 units kept free for pay-as-you-go.
CASES = [
    # capacity, payg, spot, requested, status
    (20, 0, 0, 1, WITH_STOCK),
    (20, 10, 5, 3, WITH_STOCK),  # 5 free, 3 asked: 2 left = the reserve
    (20, 10, 5, 4, CLOSED_WITH_STOCK),  # 5 free, 4 asked: 1 left < reserve
    (20, 17, 0, 2, CLOSED_WITH_STOCK),  # 3 free, 2 asked: 1 left < reserve
    (20, 18, 1, 1, CLOSED_WITH_STOCK),  # the last unit exists but is held for pay-as-you-go
    (20, 19, 1, 1, WITHOUT_STOCK),  # nothing free
    (20, 10, 5, 6, WITHOUT_STOCK),  # 5 free, 6 asked
    (20, 25, 0, 1, WITHOUT_STOCK),  # pay-as-you-go over capacity counts as none free
    (0, 0, 0, 1, WITHOUT_STOCK),
]


@pytest.mark.parametrize("capacity,payg,spot,requested,status", CASES)
def test_stock_status_follows_free_capacity_and_the_payg_reserve(capacity, payg, spot, requested, status):
    assert stock_status(capacity, payg, spot, requested) == status


def test_a_pool_without_a_reserve_sells_its_last_unit():
    assert stock_status(20, 18, 1, 1, reserve_ratio=0.0) == WITH_STOCK


def test_the_reserve_rounds_up_so_small_pools_keep_a_unit():
    assert reserve(3) == 1
    assert reserve(20) == 2
    assert reserve(20, 0.0) == 0


def test_a_request_must_ask_for_at_least_one_unit():
    with pytest.raises(ValueError):
        stock_status(20, 0, 0, 0)


def test_payg_demand_beyond_free_capacity_releases_exactly_that_much_spot():
    assert spot_shortage(pool_capacity=20, payg_demand=12, spot_in_use=8) == 0
    assert spot_shortage(pool_capacity=20, payg_demand=15, spot_in_use=8) == 3


def test_an_empty_reserve_is_not_refilled_by_releasing_spot():
    assert stock_status(20, 12, 8) == WITHOUT_STOCK
    assert spot_shortage(20, 12, 8) == 0
