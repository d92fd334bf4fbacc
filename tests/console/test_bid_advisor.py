"""The bid advisor in the console (Spot Market page, History Price chart, Create Job rows) over a
seeded price history (bidding by price limit: test_bid_price_limit.py). Figures worked out by hand."""

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape
from types import SimpleNamespace

import pytest

from quotas.models import ResourceSpec
from spot.models import PriceHistory
from tests.console.test_create_job import spot_data

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 10, 12, 0, 30, tzinfo=UTC)  # 12:00 is the windows' last minute
LAST = NOW.replace(second=0)
ECS_TYPE, LINGJUN_TYPE = "ecs.g7.xlarge", "ml.gu7xf.c96m1600.8-gu108"  # on-demand 0.99 and 126 an hour


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch):
    """The advisor's windows end at NOW, whenever the test runs."""
    monkeypatch.setattr("spot.market_state.timezone", SimpleNamespace(now=lambda: NOW))


def seed_two_days(instance_type):
    """Two days of prices at 30 % of on-demand, but 70 % for the two hours from 10 hours ago."""
    spec = ResourceSpec.objects.get(instance_type=instance_type)
    od = spec.on_demand_price_per_minute
    rows = [(LAST - timedelta(minutes=2879), Decimal("0.3")), (LAST - timedelta(minutes=600), Decimal("0.7")),
            (LAST - timedelta(minutes=480), Decimal("0.3"))]
    PriceHistory.objects.bulk_create(PriceHistory(spec=spec, at=at, price=od * r) for at, r in rows)
    return spec


def figures(html: str) -> dict:
    """{(row, days): text} of the advisor's table."""
    out = {}
    for row, cells in re.findall(r'<tr data-row="(\w+)">(.*?)</tr>', html, re.DOTALL):
        for days, text in re.findall(r'data-days="(\d+)">(.*?)</td>', cells, re.DOTALL):
            out[(row, int(days))] = re.sub(r"<[^>]+>", "", unescape(text)).strip()
    return out


# ECS, a 50 % bid (0.4950 an hour): released when the 70 % spike starts, back when it ends. Last day:
# 1,440 minutes less the 120 of the spike held (91.7 %), 1 release, paying 30 % (0.2970 /h), saving
# 0.99 - 0.297 = 0.6930 /h (70 %). Last 7 and 30 days: the 2 recorded days, 2,760 of 2,880 minutes
# (95.8 %), 1 release in 2 days (0.50 a day).
ECS_FIGURES = {
    ("held", 1): "91.7%", ("held", 7): "95.8%", ("held", 30): "95.8%",
    ("releases", 1): "1.00", ("releases", 7): "0.50", ("releases", 30): "0.50",
    ("expected", 1): "0.2970", ("expected", 30): "0.2970",
    ("saving", 1): "0.6930 (70.0%)", ("saving", 30): "0.6930 (70.0%)",
    ("recorded", 1): "1.0 of 1 day", ("recorded", 7): "2.0 of 7 days", ("recorded", 30): "2.0 of 30 days",
}


def assert_figures(html, expected):
    shown = figures(html)
    assert {k: shown.get(k) for k in expected} == expected


def test_the_spot_market_page_advises_a_discount_bid_and_draws_it_on_the_history_price_chart(alice_client):
    seed_two_days(ECS_TYPE)
    response = alice_client.get("/spot/", {"spec": ECS_TYPE, "bid_kind": "discount", "bid_discount": "0.5"})
    html = response.content.decode()
    assert response.status_code == 200
    assert_figures(html, ECS_FIGURES)
    figure = json.loads(re.search(r'<script id="fig-[^"]*" type="application/json">(.*?)</script>', html, re.DOTALL)[1])
    bid_line = next(t for t in figure["data"] if t["name"].startswith("Your bid"))
    assert bid_line["name"] == "Your bid (0.4950 /h)" and set(bid_line["y"]) == {0.495}


def test_a_price_limit_per_hour_gets_the_same_advice_as_the_discount_it_equals(alice_client):
    seed_two_days(ECS_TYPE)
    response = alice_client.get(f"/spot/{ECS_TYPE}/history/", {"bid_kind": "price_limit", "bid_price_limit": "0.495"})
    assert response.status_code == 200
    assert_figures(response.content.decode(), ECS_FIGURES)


def test_a_lingjun_bid_is_released_by_the_last_hours_average(alice_client):
    # The hour's average passes 50 % on the spike's 31st minute, so the bid runs (and pays 70 %) for
    # 30 minutes of it; it comes back when the price falls, protected for an hour while the average
    # is still high. Held 1,350 of 1,440 minutes (93.8 %), 1 release, paying
    # (30 x 1.47 + 1,320 x 0.63) / 1,350 = 0.648667 a minute, 38.9200 an hour.
    seed_two_days(LINGJUN_TYPE)
    response = alice_client.get(f"/spot/{LINGJUN_TYPE}/history/", {"bid_kind": "discount", "bid_discount": "0.5"})
    html = response.content.decode()
    assert_figures(html, {("held", 1): "93.8%", ("releases", 1): "1.00", ("expected", 1): "38.9200"})
    assert "last hour&#x27;s average" in html or "last hour's average" in html


def test_a_job_resource_row_asks_for_advice_with_its_bid_alone(alice_client):
    seed_two_days(ECS_TYPE)
    response = alice_client.get(f"/spot/{ECS_TYPE}/advice/", {
        "prefix": "roles-0", "roles-0-bid_kind": "price_limit", "roles-0-bid_price_limit": "0.495"})
    html = response.content.decode()
    assert response.status_code == 200
    assert_figures(html, ECS_FIGURES)
    # The chart the row opens draws the same bid.
    assert f"/spot/{ECS_TYPE}/history/?bid_kind=price_limit&amp;bid_price_limit=0.495" in html


def test_the_create_job_form_shows_the_advice_when_a_spot_row_is_refreshed(alice_client):
    seed_two_days(ECS_TYPE)
    response = alice_client.post("/jobs/create/", spot_data(_action="refresh", **{"roles-0-bid_discount": "0.5"}))
    assert_figures(response.content.decode(), ECS_FIGURES)


@pytest.mark.parametrize("query, field, expected", [
    ({"bid_kind": "price_limit", "bid_price_limit": "5"}, "bid_price_limit",
     "market range 0.0990 /h to 0.9900 /h, got 5.0000 /h"),
    ({"bid_kind": "price_limit", "bid_price_limit": "cheap"}, "bid_price_limit", "must be a price per node-hour"),
    ({"bid_kind": "discount", "bid_discount": "0.95"}, "bid_discount", "0.95 is not allowed"),
])
def test_a_bad_bid_is_refused_with_400_naming_the_field(alice_client, query, field, expected):
    response = alice_client.get(f"/spot/{ECS_TYPE}/advice/", {"prefix": "roles-0", **{f"roles-0-{k}": v for k, v in query.items()}})
    html = unescape(response.content.decode())
    assert response.status_code == 400
    assert f'data-field="{field}"' in html and expected in html


def test_a_lingjun_price_limit_is_refused_by_the_bid_rules(alice_client):
    response = alice_client.get(f"/spot/{LINGJUN_TYPE}/history/", {"bid_kind": "price_limit", "bid_price_limit": "60"})
    assert response.status_code == 400
    assert "Lingjun resources accept only discount bids" in response.content.decode()


def test_the_advice_endpoint_takes_only_a_job_resource_row_prefix(alice_client):
    response = alice_client.get(f"/spot/{ECS_TYPE}/advice/", {"prefix": "envs", "envs-bid_discount": "0.5"})
    assert response.status_code == 400 and b"prefix" in response.content
