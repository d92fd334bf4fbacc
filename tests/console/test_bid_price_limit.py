"""Bidding by price limit in the Create Job form: per node-hour in the form, per node-minute in the
API, checked by create_job (market.bids.validate_spot_bid) and refused next to its input."""

import re
from decimal import Decimal

import pytest

from jobs.models import Job
from tests.console.test_create_job import field_error, lingjun_spot_data, spot_data

pytestmark = pytest.mark.django_db


def test_a_spot_job_bids_by_price_limit_per_hour(alice_client):
    response = alice_client.post("/jobs/create/", spot_data(**{
        "roles-0-bid_kind": "price_limit", "roles-0-bid_discount": "0.3", "roles-0-bid_price_limit": "0.6"}))
    assert response.status_code == 302
    spec = Job.objects.get().specs.get()
    # 0.6 an hour is 0.01 a node-minute, the API's unit; the discount left in the other input is not sent.
    assert (spec.spot_price_limit, spec.spot_discount_limit) == (Decimal("0.010000"), None)


def test_a_price_limit_above_on_demand_is_refused_next_to_its_input(alice_client):
    response = alice_client.post("/jobs/create/", spot_data(**{"roles-0-bid_kind": "price_limit", "roles-0-bid_price_limit": "1.2"}))
    message = field_error(response.content.decode(), "id_roles-0-bid_price_limit")
    assert "within the market range 0.0990 /h to 0.9900 /h, got 1.2000 /h" in message
    assert not Job.objects.exists()


def test_a_spot_job_bidding_by_price_limit_needs_one(alice_client):
    response = alice_client.post("/jobs/create/", spot_data(**{"roles-0-bid_kind": "price_limit", "roles-0-bid_price_limit": ""}))
    assert "Enter a Bid Price Limit per node-hour" in field_error(response.content.decode(), "id_roles-0-bid_price_limit")
    assert not Job.objects.exists()


def test_a_lingjun_price_limit_is_refused_next_to_its_input_by_create_job(alice_client):
    response = alice_client.post("/jobs/create/", lingjun_spot_data(
        vpc_id="vpc-1", switch_id="vsw-1", security_group_id="sg-1",
        **{"roles-0-bid_kind": "price_limit", "roles-0-bid_price_limit": "60"}))
    assert "Lingjun resources accept only discount bids" in field_error(response.content.decode(), "id_roles-0-bid_price_limit")
    assert not Job.objects.exists()


def test_clone_keeps_a_price_limit_per_hour(alice_client):
    alice_client.post("/jobs/create/", spot_data(**{"roles-0-bid_kind": "price_limit", "roles-0-bid_price_limit": "0.6"}))
    html = alice_client.get("/jobs/create/", {"clone": Job.objects.get().job_id}).content.decode()
    assert re.search(r'name="roles-0-bid_kind" value="price_limit"[^>]*checked', html)
    assert re.search(r'name="roles-0-bid_price_limit" value="0.6"', html)
