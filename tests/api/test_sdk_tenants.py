"""Tenants are walls in the quota and node actions, through the official SDK: bob, an admin (not
staff) of ml-research in the demo tenant, and mallory, the owner of red-team in the tenant acme,
see and change only their own tenant's quotas and nodes."""

import re

import pytest
from alibabacloud_paistudio20220112 import models as studio

from quotas.models import Node, Quota
from tests.api.conftest import key_of, studio_client
from tests.api.test_sdk_studio import rejected


@pytest.fixture
def red(mallory):
    return Quota.objects.get(name="red-quota")


@pytest.fixture
def bob_admin_studio(endpoint, bob_admin):
    return studio_client(endpoint, *key_of(bob_admin))


@pytest.fixture
def mallory_studio(endpoint, mallory):
    return studio_client(endpoint, *key_of(mallory))


def names(body) -> set[str]:
    return {q.quota_name for q in body.quotas}


def test_list_quotas_shows_only_the_callers_tenant(bob_admin_studio, mallory_studio, red):
    assert "red-quota" not in names(bob_admin_studio.list_quotas(studio.ListQuotasRequest()).body)
    assert names(mallory_studio.list_quotas(studio.ListQuotasRequest()).body) == {"red-quota"}
    ids = studio.ListQuotasRequest(quota_ids=red.quota_id)
    assert bob_admin_studio.list_quotas(ids).body.total_count == 0


def test_a_quota_of_another_tenant_does_not_exist_to_get_change_or_delete(bob_admin_studio, red):
    for call in (
        lambda: bob_admin_studio.get_quota(red.quota_id, studio.GetQuotaRequest()),
        lambda: bob_admin_studio.update_quota(red.quota_id, studio.UpdateQuotaRequest(description="bob was here")),
        lambda: bob_admin_studio.delete_quota(red.quota_id),
        lambda: bob_admin_studio.list_quota_workloads(red.quota_id, studio.ListQuotaWorkloadsRequest()),
    ):
        error = rejected(call)
        assert (error.status_code, error.code) == (404, "EntityNotExist.Quota")
    red.refresh_from_db()
    assert red.description == "" and red.nodes.count() == 2


def test_a_quota_of_another_tenant_cannot_be_a_parent(bob_admin_studio, mallory_studio, red):
    error = rejected(lambda: bob_admin_studio.create_quota(studio.CreateQuotaRequest().from_map({
        "QuotaName": "inside-red", "ParentQuotaId": red.quota_id,
        "Min": {"NodeSpecs": [{"Type": "ecs.gn6v-c8g1.16xlarge", "Count": 1}]},
    })))
    assert (error.status_code, error.code) == (400, "InvalidParameter") and "ParentQuotaId" in error.message
    assert red.nodes.count() == 2
    nlp = Quota.objects.get(name="nlp-team")
    error = rejected(lambda: mallory_studio.create_quota(studio.CreateQuotaRequest().from_map({
        "QuotaName": "inside-nlp", "ParentQuotaId": nlp.quota_id,
        "Min": {"NodeSpecs": [{"Type": "ecs.gn6v-c8g1.16xlarge", "Count": 1}]},
    })))
    assert (error.status_code, error.code) == (400, "InvalidParameter")
    assert not Quota.objects.filter(name__startswith="inside-").exists() and nlp.nodes.count() == 2


def test_list_nodes_shows_the_public_pool_and_the_callers_tenant_only(bob_admin_studio, mallory_studio, red):
    listed = {n.node_name for n in bob_admin_studio.list_nodes(studio.ListNodesRequest(page_size=100)).body.nodes}
    assert "nlp-team-gn6v-c8g1-0" in listed and "pub-g7-0" in listed
    assert not any(name.startswith("red-quota") for name in listed)
    listed = {n.node_name for n in mallory_studio.list_nodes(studio.ListNodesRequest(page_size=100)).body.nodes}
    assert {"red-quota-gn6v-0", "red-quota-gn6v-1", "pub-g7-0"} <= listed
    assert not any(name.startswith(("nlp-team", "cv-team", "llm-")) for name in listed)
    error = rejected(lambda: bob_admin_studio.list_nodes(studio.ListNodesRequest(quota_id=red.quota_id)))
    assert (error.status_code, error.code) == (404, "EntityNotExist.Quota")


def test_a_tenant_admin_creates_a_sub_quota_with_random_id_from_his_own_quota(bob_admin_studio):
    nlp = Quota.objects.get(name="nlp-team")
    quota_id = bob_admin_studio.create_quota(studio.CreateQuotaRequest().from_map({
        "QuotaName": "nlp-small", "ParentQuotaId": nlp.quota_id,
        "Min": {"NodeSpecs": [{"Type": "ecs.gn6v-c8g1.16xlarge", "Count": 1}]},
    })).body.quota_id
    assert re.fullmatch(r"quota[0-9a-f]{12}", quota_id)
    quota = Quota.objects.get(quota_id=quota_id)
    assert (quota.tenant.name, quota.parent, quota.nodes.count()) == ("demo", nlp, 1)
    assert Node.objects.filter(quota=nlp).count() == 1
