"""Tenants are walls on the Quotas and Nodes pages: bob, an admin (not staff) of ml-research in the
demo tenant, and mallory, the owner of red-team in the tenant acme, see and change only their own
tenant's quotas and nodes. alice is staff: she sees every tenant, but a quota stays within its own."""

import re

import pytest

from cycle import tasks as cycle_tasks
from quotas.models import Node, Quota
from tests.console.conftest import client_for, quota_job

pytestmark = pytest.mark.django_db


def form(quota: Quota, **changes) -> dict:
    """The edit form of the quota as posted unchanged, with `changes`."""
    return {
        "name": quota.name, "description": quota.description, "resource_type": quota.resource_type,
        "parent": quota.parent_id or "", "queue_strategy": quota.queue_strategy,
        "min_runtime_before_preemption_s": quota.min_runtime_before_preemption_s,
        "workspaces": [w.pk for w in quota.workspaces.all()], "nodes": [n.pk for n in quota.nodes.all()],
        **changes,
    }


def choices(html: str, select: str) -> set[str]:
    options = re.search(rf'<select name="{select}".*?</select>', html, re.DOTALL)[0]
    return set(re.findall(r'<option value="\d+"[^>]*>([^<]+)</option>', options))


@pytest.fixture
def red(mallory):
    return Quota.objects.get(name="red-quota")


@pytest.fixture
def bob_admin_client(client, bob_admin):
    return client_for(client, bob_admin)


def test_a_workspace_admin_lists_only_the_quotas_of_his_own_tenant(bob_admin_client, red, client, mallory):
    html = bob_admin_client.get("/quotas/").content.decode()
    assert "nlp-team" in html and "red-quota" not in html
    html = client_for(client, mallory).get("/quotas/").content.decode()
    assert "red-quota" in html and "nlp-team" not in html and "ml-platform" not in html


def test_a_quota_of_another_tenant_is_a_404_to_load_and_to_change(bob_admin_client, red):
    url = f"/quotas/{red.quota_id}/edit/"
    assert bob_admin_client.get(url).status_code == 404
    response = bob_admin_client.post(url, form(red, description="bob was here", nodes=[]))
    assert response.status_code == 404
    red.refresh_from_db()
    assert red.description == "" and red.nodes.count() == 2


def test_a_quota_of_another_tenant_is_not_offered_or_taken_as_a_parent(bob_admin_client, red):
    assert choices(bob_admin_client.get("/quotas/new/").content.decode(), "parent") == {
        "ml-platform", "nlp-team", "cv-team", "llm-pretrain"}
    response = bob_admin_client.post("/quotas/new/", {
        "name": "inside-red", "parent": red.pk, "resource_type": "ECS", "queue_strategy": "BestEffort",
        "min_runtime_before_preemption_s": "0", "nodes": [red.nodes.first().pk],
    })
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not Quota.objects.filter(name="inside-red").exists()
    assert red.nodes.count() == 2


def test_nodes_of_another_tenant_are_not_offered_or_taken(bob_admin_client, red):
    nlp = Quota.objects.get(name="nlp-team")
    html = bob_admin_client.get(f"/quotas/{nlp.quota_id}/edit/").content.decode()
    assert "nlp-team-gn6v-c8g1-0" in html and "red-quota-gn6v" not in html
    theirs = list(red.nodes.values_list("pk", flat=True))
    response = bob_admin_client.post(f"/quotas/{nlp.quota_id}/edit/", form(nlp, nodes=[*form(nlp)["nodes"], *theirs]))
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert set(red.nodes.values_list("pk", flat=True)) == set(theirs)


def test_the_nodes_page_hides_the_nodes_of_another_tenant(bob_admin_client, red, client, mallory):
    html = bob_admin_client.get("/nodes/").content.decode()
    assert "nlp-team-gn6v-c8g1-0" in html and "pub-g7-0" in html and "red-quota-gn6v" not in html
    html = client_for(client, mallory).get("/nodes/").content.decode()
    assert "red-quota-gn6v-0" in html and "pub-g7-0" in html and "nlp-team-gn6v" not in html


def test_a_workspace_admin_edits_a_quota_of_his_tenant_bound_to_his_workspace(bob_admin_client):
    nlp = Quota.objects.get(name="nlp-team")
    response = bob_admin_client.post(f"/quotas/{nlp.quota_id}/edit/", form(nlp, description="bob's team"))
    assert response.status_code == 302
    assert Quota.objects.get(pk=nlp.pk).description == "bob's team"


def test_a_quota_of_his_tenant_not_bound_to_his_workspaces_is_read_only_to_him(bob_admin_client):
    finetune = Quota.objects.get(name="llm-finetune")  # bound to vision-lab only
    html = bob_admin_client.get("/quotas/").content.decode()
    assert "llm-finetune" in html and f"/quotas/{finetune.quota_id}/edit/" not in html
    assert bob_admin_client.get(f"/quotas/{finetune.quota_id}/edit/").status_code == 403


def test_staff_see_every_tenant_but_a_quota_takes_a_parent_of_its_own(alice_client, red):
    assert "red-quota" in alice_client.get("/quotas/").content.decode()
    nlp = Quota.objects.get(name="nlp-team")
    html = alice_client.get(f"/quotas/{nlp.quota_id}/edit/").content.decode()
    assert "red-quota" not in choices(html, "parent")
    response = alice_client.post(f"/quotas/{nlp.quota_id}/edit/", form(nlp, parent=red.pk))
    assert response.status_code == 200
    assert Quota.objects.get(pk=nlp.pk).parent.name == "ml-platform"


def test_taking_a_node_off_a_quota_is_refused_while_a_pod_runs_on_it(alice_client, alice):
    quota_job(alice, pods=1)
    cycle_tasks.process_cycle.run()
    busy = Node.objects.get(pods__job__display_name="train")
    nlp = busy.quota
    response = alice_client.post(f"/quotas/{nlp.quota_id}/edit/", form(nlp, nodes=[n.pk for n in nlp.nodes.exclude(pk=busy.pk)]))
    assert response.status_code == 200
    assert f"{busy.name} runs pod" in response.content.decode()
    assert Node.objects.get(pk=busy.pk).quota == nlp


def test_only_free_ready_nodes_of_the_pool_are_offered(alice_client):
    Node.objects.filter(name="pub-g7-0").update(status="NotReady")
    html = alice_client.get("/quotas/new/").content.decode()
    assert "pub-g7-1" in html and "pub-g7-0" not in html
    response = alice_client.post("/quotas/new/", {"name": "cpu", "resource_type": "ECS", "queue_strategy": "BestEffort",
                                                  "min_runtime_before_preemption_s": "0",
                                                  "nodes": [Node.objects.get(name="pub-g7-0").pk]})
    assert response.status_code == 200 and not Quota.objects.filter(name="cpu").exists()


def test_a_new_quota_gets_a_random_id_not_the_next_number(alice_client):
    response = alice_client.post("/quotas/new/", {"name": "cpu-team", "resource_type": "ECS",
                                                  "queue_strategy": "BestEffort", "min_runtime_before_preemption_s": "0"})
    assert response.status_code == 302
    assert re.fullmatch(r"quota[0-9a-f]{12}", Quota.objects.get(name="cpu-team").quota_id)


def test_workspaces_of_another_tenant_are_not_offered(bob_admin_client, red):
    nlp = Quota.objects.get(name="nlp-team")
    for url in ("/quotas/new/", f"/quotas/{nlp.quota_id}/edit/"):
        html = bob_admin_client.get(url).content.decode()
        assert "ml-research" in html and "red-team" not in html
