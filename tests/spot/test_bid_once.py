"""What a bid is worth has one home, market.bids.bid_price: the scheduler's snapshot (JobSpec.bid)
and the market read the same Decimal, rounded as the market price is."""

from datetime import timedelta
from decimal import Decimal

import pytest

from cycle import tasks as cycle_tasks
from jobs.models import JobSpec
from jobs.states import JobStatus
from market.bids import DISCOUNTS, bid_price
from market.engine import market_price
from quotas.models import ResourceSpec
from tests.spot.builders import A10, at, price_row, submit_spot


@pytest.fixture(autouse=True)
def no_cycle_requests(monkeypatch):
    monkeypatch.setattr("jobs.cycle_requests._request_now", lambda: None)


# On-demand prices per node-minute whose product with a discount ends in a half at the 7th place.
ON_DEMAND = ["0.123445", "0.000005", "0.147000", "2.100000", "1.000001", "0.333335"]


@pytest.mark.parametrize("on_demand", ON_DEMAND)
@pytest.mark.parametrize("discount", DISCOUNTS)
def test_a_discount_bid_is_worth_the_market_price_at_that_discount_wherever_it_is_read(on_demand, discount):
    on_demand = Decimal(on_demand)
    worth = bid_price(on_demand, discount=discount)
    assert JobSpec.bid(None, discount, on_demand) == worth  # what the scheduler's snapshot reads
    assert worth == market_price(discount, on_demand)  # a 50 % bid holds at a 50 % market


def test_a_bid_at_the_market_discount_is_admitted_when_the_product_needs_rounding(demo_cluster):
    # 0.5 x 0.123445 = 0.0617225: the market at half of on-demand is 0.061723 (half up), and a
    # 50 % bid must meet it, not round to 0.061722 and wait below it.
    ResourceSpec.objects.filter(instance_type=A10).update(on_demand_price_per_minute=Decimal("0.123445"))
    price_row(at(10) - timedelta(minutes=1), str(market_price(Decimal("0.5"), Decimal("0.123445"))))
    job = submit_spot(A10, "0.5")

    cycle_tasks.process_cycle.run(now=at(10))
    job.refresh_from_db()
    assert job.status == JobStatus.ENV_PREPARING, job.wait_reason
