"""Billing: the bills of a range of days, broken down by user and by quota, and an empty page that says
why it is empty (#28)."""

import csv
import io
from datetime import date

import pytest

from tests.console.conftest import quota_job, spot_job
from tests.console.test_admin_pages import bill

pytestmark = pytest.mark.django_db


@pytest.fixture
def bills(alice, bob):
    alice_spot = spot_job(alice, "alice-spot")
    bob_spot = spot_job(bob, "bob-spot")
    bill(alice_spot, date(2026, 11, 3), "spot", "1.000000", "3.000000")
    bill(alice_spot, date(2026, 11, 20), "spot", "2.000000", "5.000000")
    bill(bob_spot, date(2026, 11, 21), "spot", "0.500000", "1.500000")
    return alice_spot, bob_spot


def test_the_range_picks_the_bills_of_its_days_for_the_page_and_the_csv(alice_client, bills):
    html = alice_client.get("/billing/?from=2026-11-15&to=2026-11-30").content.decode()
    assert "2026-11-20" in html and "2026-11-21" in html and "2026-11-03" not in html
    assert 'href="/billing/export.csv?from=2026-11-15&amp;to=2026-11-30"' in html
    rows = list(csv.reader(io.StringIO(alice_client.get("/billing/export.csv?from=2026-11-15&to=2026-11-30").content.decode())))
    assert [r[0] for r in rows[1:]] == ["2026-11-21", "2026-11-20"]


def test_bills_are_broken_down_by_user_and_by_quota(alice_client, alice, bills):
    vision = quota_job(alice, "vision", quota="nlp-team")
    bill(vision, date(2026, 11, 20), "postpaid", "4.000000", "4.000000")
    response = alice_client.get("/billing/?from=2026-11-01&to=2026-11-30")
    by_user = {g.name: g for g in response.context["by_user"]}
    assert {name: str(g.amount) for name, g in by_user.items()} == {"alice": "7.000000", "bob": "0.500000"}
    assert str(by_user["alice"].savings) == "5.000000"
    by_quota = {g.name: str(g.amount) for g in response.context["by_quota"]}
    assert by_quota == {"nlp-team": "4.000000", "": "3.500000"}
    assert "No quota (public pool: spot and pay-as-you-go)" in response.content.decode()


def test_a_range_without_bills_says_which_days_and_what_is_billed(alice_client, bills):
    html = alice_client.get("/billing/?from=2026-10-01&to=2026-10-31").content.decode()
    assert "No bills in ml-research from 2026-10-01 to 2026-10-31." in html
    assert "Resource Quota jobs are prepaid and have no bills" in html
    assert "within 5 minutes" in html
    assert 'id="billing-bills"' not in html


def test_a_reversed_range_is_refused_naming_the_field(alice_client):
    response = alice_client.get("/billing/?from=2026-11-30&to=2026-11-01")
    assert response.status_code == 400
    assert "To: To (2026-11-01) must be on or after From (2026-11-30)." in response.content.decode()
    csv_response = alice_client.get("/billing/export.csv?from=2026-11-30&to=2026-11-01")
    assert csv_response.status_code == 400 and b"to: To (2026-11-01)" in csv_response.content


def test_the_default_range_is_the_last_30_days(alice_client):
    form = alice_client.get("/billing/").context["form"]
    assert (form.cleaned_data["to"] - form.cleaned_data["from"]).days == 29
