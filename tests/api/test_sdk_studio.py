"""PaiStudio 2022-01-12 (quotas, nodes, price history) and DLC ListEcsSpecs through the official SDKs."""

from datetime import timedelta
from decimal import Decimal

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc
from alibabacloud_paistudio20220112 import models as studio
from alibabacloud_tea_openapi.exceptions import ClientException
from django.utils import timezone

from jobs.models import Job, Pod, PodKind
from quotas.models import Membership, Node, Quota, ResourceSpec, Role
from spot.models import PriceHistory


def rejected(call) -> ClientException:
    with pytest.raises(ClientException) as info:
        call()
    return info.value


def iso(at) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- GetSpotPriceHistory, ListEcsSpecs ------------------------------------------------------------

@pytest.fixture
def a10_prices(demo_cluster):
    spec = ResourceSpec.objects.get(instance_type="ecs.gn7i-c8g1.2xlarge")  # on demand 0.147
    now = timezone.now().replace(microsecond=0)
    for hours, price in ((30, "0.0441"), (2, "0.0735"), (1, "0.0588")):
        PriceHistory.objects.create(spec=spec, at=now - timedelta(hours=hours), price=Decimal(price))
    return now


def test_price_history_is_the_discount_on_the_on_demand_price(alice_studio, a10_prices):
    body = alice_studio.get_spot_price_history(
        "ecs.gn7i-c8g1.2xlarge", studio.GetSpotPriceHistoryRequest(start_time=iso(a10_prices - timedelta(hours=3)))
    ).body
    assert body.total_count == 2
    assert [(p.spot_discount, p.timestamp) for p in body.spot_price_history] == [
        (0.5, iso(a10_prices - timedelta(hours=2))), (0.4, iso(a10_prices - timedelta(hours=1)))]
    assert body.spot_price_history[0].instance_type == "ecs.gn7i-c8g1.2xlarge"


def test_price_history_defaults_to_the_last_three_days(alice_studio, a10_prices):
    body = alice_studio.get_spot_price_history("ecs.gn7i-c8g1.2xlarge", studio.GetSpotPriceHistoryRequest()).body
    assert [p.spot_discount for p in body.spot_price_history] == [0.3, 0.5, 0.4]


def test_price_history_refuses_a_window_over_seven_days(alice_studio, a10_prices):
    error = rejected(lambda: alice_studio.get_spot_price_history("ecs.gn7i-c8g1.2xlarge", studio.GetSpotPriceHistoryRequest(
        start_time=iso(a10_prices - timedelta(days=8)), end_time=iso(a10_prices))))
    assert error.message.startswith("code: 400, StartTime: must be at most 7 days before EndTime")


def test_list_ecs_specs_shows_the_spot_discount_and_stock(alice_dlc, a10_prices):
    body = alice_dlc.list_ecs_specs(dlc.ListEcsSpecsRequest(accelerator_type="GPU", resource_type="ECS")).body
    specs = {s.instance_type: s for s in body.ecs_specs}
    assert set(specs) == {"ecs.gn7i-c8g1.2xlarge", "ecs.gn6v-c8g1.16xlarge"}
    a10 = specs["ecs.gn7i-c8g1.2xlarge"]
    assert (a10.cpu, a10.memory, a10.gpu, a10.gpu_type) == (8, 30, 1, "NVIDIA A10")
    assert (a10.non_protect_spot_discount, a10.spot_stock_status) == (0.4, "WithStock")
    assert a10.payment_types == ["PostPaid", "Spot"]
    assert specs["ecs.gn6v-c8g1.16xlarge"].non_protect_spot_discount is None  # no price recorded yet


def test_a_pool_with_only_the_reserve_left_is_closed_to_spot(alice_dlc, alice):
    # ecs.g7.xlarge has a public pool of 4 nodes; with 3 busy the last is the pay-as-you-go reserve.
    job = Job.objects.create(job_id="dlc-busy", workspace_id=Membership.objects.filter(user=alice).first().workspace_id,
                             user=alice, display_name="busy", user_command="x")
    for i, node in enumerate(Node.objects.filter(spec__instance_type="ecs.g7.xlarge", quota=None)[:3]):
        Pod.objects.create(pod_id=f"busy-{i}", job=job, role="Worker", index=i, node=node, status="Running",
                           kind=PodKind.PAYG)
    spec = alice_dlc.list_ecs_specs(dlc.ListEcsSpecsRequest(instance_types="ecs.g7.xlarge")).body.ecs_specs[0]
    assert spec.spot_stock_status == "ClosedWithStock"


# --- quotas ---------------------------------------------------------------------------------------

def test_list_quotas_shows_min_nodes_usage_and_bindings(alice_studio, research):
    body = alice_studio.list_quotas(studio.ListQuotasRequest()).body
    quotas = {q.quota_name: q for q in body.quotas}
    assert body.total_count == 5 and set(quotas) == {"ml-platform", "nlp-team", "cv-team", "llm-pretrain", "llm-finetune"}
    platform = quotas["ml-platform"]
    assert [(n.type, n.count) for n in platform.min.node_specs] == [("ecs.gn6v-c8g1.16xlarge", 4)]
    assert platform.quota_details.actual_min_quota.gpu == "32"
    assert platform.quota_details.actual_min_quota.memory == "1024Gi"
    assert {s.quota_name for s in platform.sub_quotas} == {"nlp-team", "cv-team"}
    assert quotas["nlp-team"].parent_quota_id == platform.quota_id
    assert [(w.workspace_id, w.workspace_name) for w in quotas["nlp-team"].workspaces] == [(str(research.pk), "ml-research")]

    children = alice_studio.list_quotas(studio.ListQuotasRequest(parent_quota_id=platform.quota_id)).body
    assert {q.quota_name for q in children.quotas} == {"nlp-team", "cv-team"}
    roots = alice_studio.list_quotas(studio.ListQuotasRequest(parent_quota_id="")).body
    assert {q.quota_name for q in roots.quotas} == {"ml-platform", "llm-pretrain", "llm-finetune"}


def test_create_quota_takes_free_nodes_from_the_public_pool(alice_studio):
    quota_id = alice_studio.create_quota(studio.CreateQuotaRequest().from_map({
        "QuotaName": "a10-team", "ResourceType": "ECS", "Min": {"NodeSpecs": [{"Type": "ecs.gn7i-c8g1.2xlarge", "Count": 2}]},
    })).body.quota_id

    quota = alice_studio.get_quota(quota_id, studio.GetQuotaRequest()).body
    assert (quota.quota_name, quota.parent_quota_id) == ("a10-team", None)
    assert [(n.type, n.count) for n in quota.min.node_specs] == [("ecs.gn7i-c8g1.2xlarge", 2)]
    assert Node.objects.filter(quota__quota_id=quota_id).count() == 2
    assert Node.objects.filter(spec__instance_type="ecs.gn7i-c8g1.2xlarge", quota=None).count() == 4


def test_create_quota_says_which_field_asks_for_too_many_nodes(alice_studio):
    platform = Quota.objects.get(name="ml-platform")
    error = rejected(lambda: alice_studio.create_quota(studio.CreateQuotaRequest().from_map({
        "QuotaName": "greedy", "ParentQuotaId": platform.quota_id,
        "Min": {"NodeSpecs": [{"Type": "ecs.gn6v-c8g1.16xlarge", "Count": 1}]},
    })))
    # ml-platform's gn6v nodes all belong to its sub-quotas: none is free in the parent itself.
    assert error.message.startswith(
        "code: 400, Min.NodeSpecs[0].Count: only 0 free ecs.gn6v-c8g1.16xlarge node(s) in the parent quota ml-platform")
    assert not Quota.objects.filter(name="greedy").exists()


def test_a_sub_quota_takes_nodes_from_its_parent_and_gives_them_back_when_deleted(alice_studio):
    nlp = Quota.objects.get(name="nlp-team")
    sub = alice_studio.create_quota(studio.CreateQuotaRequest().from_map({
        "QuotaName": "nlp-small", "ParentQuotaId": nlp.quota_id,
        "Min": {"NodeSpecs": [{"Type": "ecs.gn6v-c8g1.16xlarge", "Count": 1}]},
    })).body.quota_id
    assert Node.objects.filter(quota=nlp).count() == 1

    alice_studio.update_quota(sub, studio.UpdateQuotaRequest(description="for fine-tuning", queue_strategy="StrictFIFO"))
    quota = alice_studio.get_quota(sub, studio.GetQuotaRequest()).body
    assert (quota.description, quota.queue_strategy) == ("for fine-tuning", "StrictFIFO")

    alice_studio.delete_quota(sub)
    assert Node.objects.filter(quota=nlp).count() == 2


def test_quota_changes_need_an_admin(bob_studio):
    nlp = Quota.objects.get(name="nlp-team")
    for call in (
        lambda: bob_studio.update_quota(nlp.quota_id, studio.UpdateQuotaRequest(description="mine")),
        lambda: bob_studio.delete_quota(nlp.quota_id),
        lambda: bob_studio.create_quota(studio.CreateQuotaRequest(quota_name="root-by-bob")),
    ):
        error = rejected(call)
        assert (error.status_code, error.code) == (403, "NoPermission")


def test_a_workspace_admin_may_change_a_quota_bound_to_it(bob_studio, bob, research):
    Membership.objects.filter(user=bob, workspace=research).update(role=Role.ADMIN)
    nlp = Quota.objects.get(name="nlp-team")
    bob_studio.update_quota(nlp.quota_id, studio.UpdateQuotaRequest(description="admin edit"))
    assert Quota.objects.get(pk=nlp.pk).description == "admin edit"


def running_on_nlp_team(dlc_client) -> tuple[str, Node]:
    """A one-pod job of nlp-team (quota00000002) created through the SDK, its pod running on a node."""
    job_id = dlc_client.create_job(dlc.CreateJobRequest().from_map({
        "DisplayName": "bert", "UserCommand": "python x.py", "ResourceId": "quota00000002",
        "JobSpecs": [{"Type": "Worker", "Image": "pt", "PodCount": 1, "EcsSpec": "ecs.gn6v-c8g1.16xlarge"}],
    })).body.job_id
    node = Node.objects.filter(quota__name="nlp-team").first()
    Pod.objects.filter(job__job_id=job_id).update(node=node, status="Running", gpu=8, cpu_m=64000, mem_mib=256 * 1024)
    return job_id, node


def test_list_nodes_of_a_quota_with_who_uses_them(alice_studio, alice_dlc):
    job_id, node = running_on_nlp_team(alice_dlc)

    body = alice_studio.list_nodes(studio.ListNodesRequest(quota_id="quota00000002")).body
    assert body.total_count == 2
    used = next(n for n in body.nodes if n.node_name == node.name)
    assert (used.node_type, used.gpu, used.request_gpu, used.pod_num) == ("ecs.gn6v-c8g1.16xlarge", "8", "8", 1)
    assert [u.user_name for u in used.users] == ["alice"]
    assert [q.quota_name for q in used.bound_quotas] == ["nlp-team"]

    workloads = alice_studio.list_quota_workloads("quota00000002", studio.ListQuotaWorkloadsRequest()).body
    assert [(w.workload_id, w.status, w.workload_status) for w in workloads.workloads] == [(job_id, "Enqueued", "Queuing")]
    assert workloads.workloads[0].resource.gpu == "8"


def test_list_quota_workloads_sums_the_resources_a_role_gives_itself(alice_dlc, alice_studio):
    alice_dlc.create_job(dlc.CreateJobRequest().from_map({
        "DisplayName": "sft", "UserCommand": "python x.py", "ResourceId": "quota00000002",
        "JobSpecs": [{"Type": "Worker", "Image": "pt", "PodCount": 3,
                      "ResourceConfig": {"GPU": "2", "CPU": "12", "Memory": "48Gi"}}],
    }))
    resource = alice_studio.list_quota_workloads("quota00000002", studio.ListQuotaWorkloadsRequest()).body.workloads[0].resource
    assert (resource.gpu, resource.cpu, resource.memory) == ("6", "36", "144Gi")


def test_a_parent_quota_counts_what_its_sub_quotas_use_as_its_descendants(alice_studio, alice_dlc):
    running_on_nlp_team(alice_dlc)

    quotas = {q.quota_name: q.quota_details for q in alice_studio.list_quotas(studio.ListQuotasRequest()).body.quotas}
    platform, nlp = quotas["ml-platform"], quotas["nlp-team"]
    assert (platform.used_quota.gpu, platform.descendants_allocated_quota.gpu) == ("8", "8")
    assert (nlp.used_quota.gpu, nlp.self_allocated_quota.gpu) == ("8", "8")
    assert quotas["cv-team"].used_quota.gpu == "0"



def test_list_quota_workloads_reads_the_roles_of_a_page_at_once(alice_dlc, alice, django_assert_num_queries):
    from django.http import QueryDict

    from api.quotas import _workload, quota_workloads

    for i in range(3):
        alice_dlc.create_job(dlc.CreateJobRequest().from_map({
            "DisplayName": f"sft-{i}", "UserCommand": "python x.py", "ResourceId": "quota00000002",
            "JobSpecs": [{"Type": "Worker", "Image": "pt", "PodCount": 2,
                          "ResourceConfig": {"GPU": "1", "CPU": "8", "Memory": "32Gi"}}],
        }))
    rows = list(quota_workloads(alice, Quota.objects.get(quota_id="quota00000002"), QueryDict()))
    with django_assert_num_queries(0):  # the roles came with the page
        resources = [_workload(job)["Resource"]["GPU"] for job in rows]
    assert resources == ["2", "2", "2"]
