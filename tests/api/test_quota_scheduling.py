"""The quota's scheduling settings in the API: QuotaConfig.EnableBackfill and FairShareWeight
(keys of ours: the SDK's QuotaConfig model neither sends nor reads them, so these are hand-made)."""

import pytest

from quotas.models import Quota
from tests.api.signed import signed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def nlp(demo_cluster):
    return Quota.objects.get(name="nlp-team")


def test_update_quota_sets_backfill_and_weight_and_get_quota_shows_them(live_server, alice_key, nlp):
    response = signed(live_server, alice_key, "PUT", f"/api/v1/quotas/{nlp.quota_id}",
                      body={"QuotaConfig": {"EnableBackfill": True, "FairShareWeight": "2.5"}})
    assert response.status_code == 200, response.text
    config = signed(live_server, alice_key, "GET", f"/api/v1/quotas/{nlp.quota_id}").json()["QuotaConfig"]
    assert (config["EnableBackfill"], config["FairShareWeight"]) == (True, "2.50")
    assert config["EnableSelfQuotaPreemption"] is False  # left as it was


@pytest.mark.parametrize("weight", ["0", "-1", "1.234", "lots", True])
def test_a_bad_weight_is_refused_naming_the_field_and_what_is_allowed(live_server, alice_key, nlp, weight):
    response = signed(live_server, alice_key, "PUT", f"/api/v1/quotas/{nlp.quota_id}",
                      body={"QuotaConfig": {"FairShareWeight": weight}})
    assert response.status_code == 400, response.text
    message = response.json()["Message"]
    assert "QuotaConfig.FairShareWeight" in message and "from 0.01 to 9999.99" in message
    nlp.refresh_from_db()
    assert str(nlp.weight) == "1.00"


def test_a_quota_backfills_only_once_asked(live_server, alice_key, nlp):
    assert nlp.backfill is False
    response = signed(live_server, alice_key, "PUT", f"/api/v1/quotas/{nlp.quota_id}",
                      body={"QuotaConfig": {"EnableBackfill": True}})
    assert response.status_code == 200, response.text
    nlp.refresh_from_db()
    assert (nlp.backfill, str(nlp.weight)) == (True, "1.00")
