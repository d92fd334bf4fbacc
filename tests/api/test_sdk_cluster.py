"""PaiStudio's admin actions on the cluster through the official SDK: ScaleQuota, ListResourceGroups,
GetResourceGroup, ListNodeTypes, ListNodePods, OperateNode, ListQuotaActiveUserUsages; each scoped
to what the caller may see (charlie, in no workspace, sees nothing; mallory, of acme, nothing of
the demo's), and each answering bad input with a 4xx naming the field."""

import pytest
from alibabacloud_paistudio20220112 import models as studio

from jobs.models import Job, Pod, PodKind
from quotas.models import Node, Quota, Workspace
from tests.api.conftest import key_of, studio_client
from tests.api.test_sdk_studio import rejected

V100 = "ecs.gn6v-c8g1.16xlarge"
NLP_0 = "nlp-team-gn6v-c8g1-0"


@pytest.fixture
def bob_admin_studio(endpoint, bob_admin):
    return studio_client(endpoint, *key_of(bob_admin))


@pytest.fixture
def charlie_studio(endpoint, charlie):
    return studio_client(endpoint, *key_of(charlie))


@pytest.fixture
def mallory_studio(endpoint, mallory):
    return studio_client(endpoint, *key_of(mallory))


def running(user, node: str, *, gpus=8, workspace="ml-research", quota="nlp-team", name="train") -> Pod:
    """A running job of the user with one pod holding `gpus` GPUs of the node."""
    job = Job.objects.create(job_id=f"dlc-{name}", workspace=Workspace.objects.get(name=workspace), user=user,
                             display_name=name, user_command="x", status="Running",
                             quota=Quota.objects.get(name=quota) if quota else None)
    return Pod.objects.create(pod_id=f"{name}-worker-0", job=job, role="Worker", index=0, status="Running",
                              node=Node.objects.get(name=node), gpu=gpus, cpu_m=32000, mem_mib=61440,
                              gpu_indices=list(range(gpus)), kind=PodKind.GUARANTEED)


def min_of(client, quota_id) -> dict:
    return {s.type: s.count for s in client.get_quota(quota_id, studio.GetQuotaRequest()).body.min.node_specs}


def scale(client, quota_id, count, node_type=V100, **kw):
    return client.scale_quota(quota_id, studio.ScaleQuotaRequest(
        min=studio.ResourceSpec(node_specs=[studio.NodeSpec(type=node_type, count=count)]), **kw))


# --- ScaleQuota ---------------------------------------------------------------------------------

def test_scaling_a_quota_up_takes_free_nodes_from_its_parent(alice_studio):
    ml_platform = Quota.objects.get(name="ml-platform")
    Node.objects.filter(quota__name="cv-team").update(quota=ml_platform)  # two free nodes in the parent
    nlp = Quota.objects.get(name="nlp-team")
    assert scale(alice_studio, nlp.quota_id, 3).body.quota_id == nlp.quota_id
    assert min_of(alice_studio, nlp.quota_id) == {V100: 3}
    assert Node.objects.filter(quota=ml_platform).count() == 1


def test_scaling_a_quota_down_releases_a_free_node_not_one_running_a_pod(alice_studio, bob):
    busy = running(bob, NLP_0)
    nlp = Quota.objects.get(name="nlp-team")
    scale(alice_studio, nlp.quota_id, 1)
    assert list(nlp.nodes.values_list("name", flat=True)) == [busy.node.name]
    assert Node.objects.get(name="nlp-team-gn6v-c8g1-1").quota.name == "ml-platform"


def test_scaling_below_the_nodes_running_pods_is_refused(alice_studio, bob):
    running(bob, NLP_0)
    running(bob, "nlp-team-gn6v-c8g1-1", name="other")
    nlp = Quota.objects.get(name="nlp-team")
    error = rejected(lambda: scale(alice_studio, nlp.quota_id, 1))
    assert (error.status_code, error.code) == (400, "InvalidParameter")
    assert "runs pod" in error.message and nlp.nodes.count() == 2


def test_scaling_beyond_the_free_nodes_says_how_many_there_are(alice_studio):
    nlp = Quota.objects.get(name="nlp-team")
    error = rejected(lambda: scale(alice_studio, nlp.quota_id, 5))
    assert error.status_code == 400
    assert "Min.NodeSpecs[0].Count: 3 more ecs.gn6v-c8g1.16xlarge node(s) needed, only 0 free" in error.message


@pytest.mark.parametrize("body, field", [
    ({}, "Min.NodeSpecs"),
    ({"count": -1}, "Min.NodeSpecs[0].Count"),
    ({"node_type": "ecs.unknown"}, "Min.NodeSpecs[0].Type"),
    ({"resource_group_ids": ["rg-nowhere"]}, "ResourceGroupIds"),
])
def test_bad_scale_requests_name_the_field(alice_studio, body, field):
    nlp = Quota.objects.get(name="nlp-team")
    if body == {}:
        call = lambda: alice_studio.scale_quota(nlp.quota_id, studio.ScaleQuotaRequest())
    else:
        call = lambda: scale(alice_studio, nlp.quota_id, body.pop("count", 2), **body)
    error = rejected(call)
    assert (error.status_code, error.code) == (400, "InvalidParameter") and f"{field}:" in error.message


def test_a_member_may_not_scale_and_another_tenant_does_not_see_the_quota(bob_studio, mallory_studio):
    nlp = Quota.objects.get(name="nlp-team")
    assert rejected(lambda: scale(bob_studio, nlp.quota_id, 1)).status_code == 403
    assert rejected(lambda: scale(mallory_studio, nlp.quota_id, 1)).status_code == 404
    assert nlp.nodes.count() == 2


# --- ListResourceGroups, GetResourceGroup -------------------------------------------------------

def test_resource_groups_are_the_instance_types_of_the_nodes_one_sees(bob_studio, mallory_studio):
    groups = {g.resource_group_id: g for g in bob_studio.list_resource_groups(
        studio.ListResourceGroupsRequest(page_size=50)).body.resource_groups}
    demo_v100 = Node.objects.filter(spec__instance_type=V100).exclude(quota__tenant__name="acme").count()
    assert groups[f"rg-{V100}"].node_count == demo_v100
    assert groups[f"rg-{V100}"].name == V100 and groups[f"rg-{V100}"].status == "Ready"
    theirs = {g.resource_group_id: g for g in mallory_studio.list_resource_groups(
        studio.ListResourceGroupsRequest()).body.resource_groups}
    # Mallory sees her own two V100 nodes and the public pool's, none of the demo tenant's.
    public_v100 = Node.objects.filter(spec__instance_type=V100, quota=None).count()
    assert theirs[f"rg-{V100}"].node_count == 2 + public_v100


def test_get_resource_group_and_one_that_does_not_exist(bob_studio):
    body = bob_studio.get_resource_group(f"rg-{V100}", studio.GetResourceGroupRequest()).body
    assert (body.name, body.resource_type) == (V100, "ECS")
    error = rejected(lambda: bob_studio.get_resource_group("rg-nowhere", studio.GetResourceGroupRequest()))
    assert (error.status_code, error.code) == (404, "EntityNotExist.ResourceGroup")


def test_bad_resource_group_filters_are_refused(bob_studio):
    error = rejected(lambda: bob_studio.list_resource_groups(studio.ListResourceGroupsRequest(resource_type="TPU")))
    assert (error.status_code, error.code) == (400, "InvalidParameter") and "ResourceType" in error.message


# --- ListNodeTypes ------------------------------------------------------------------------------

def test_node_types_count_the_nodes_one_sees_and_those_free_to_bind(bob_studio, mallory):
    body = bob_studio.list_node_types(studio.ListNodeTypesRequest(accelerator_type="GPU")).body
    types = {t.node_type: t for t in body.node_types}
    assert V100 in types and (types[V100].gpu, types[V100].accelerator_type) == ("8", "GPU")
    assert all(t.accelerator_type == "GPU" for t in body.node_types)
    stats = {s.node_type: s for s in body.statistics}
    assert stats[V100].total_count == Node.objects.filter(spec__instance_type=V100).exclude(
        quota__tenant__name="acme").count()
    assert stats[V100].can_be_bound_count == Node.objects.filter(spec__instance_type=V100, quota=None).count()


def test_node_types_of_a_quota_and_of_a_quota_one_cannot_see(bob_studio, mallory):
    nlp = Quota.objects.get(name="nlp-team")
    body = bob_studio.list_node_types(studio.ListNodeTypesRequest(quota_id=nlp.quota_id)).body
    assert [t.node_type for t in body.node_types] == [V100]
    red = Quota.objects.get(name="red-quota")
    error = rejected(lambda: bob_studio.list_node_types(studio.ListNodeTypesRequest(quota_id=red.quota_id)))
    assert (error.status_code, error.code) == (404, "EntityNotExist.Quota")


# --- ListNodePods -------------------------------------------------------------------------------

def test_node_pods_are_the_pods_holding_the_node(bob_studio, bob):
    pod = running(bob, NLP_0, gpus=4)
    infos = bob_studio.list_node_pods(NLP_0, studio.ListNodePodsRequest()).body.node_pod_infos
    assert [(i.pod_name, i.workload_id, i.phase, i.gpuindexes) for i in infos] == [
        (pod.pod_id, pod.job.job_id, "Running", ["0", "1", "2", "3"])]
    assert infos[0].resource_spec.gpu == "4"


def test_a_public_node_does_not_name_another_tenants_pods(bob_studio, mallory):
    running(mallory, "pub-g7-0", gpus=0, workspace="red-team", quota=None, name="red-secret")
    infos = bob_studio.list_node_pods("pub-g7-0", studio.ListNodePodsRequest()).body.node_pod_infos
    assert infos == []
    nodes = bob_studio.list_nodes(studio.ListNodesRequest(node_names="pub-g7-0")).body.nodes
    assert nodes[0].pod_num == 1 and nodes[0].users == []


def test_node_pods_of_a_node_one_cannot_see_do_not_exist(charlie_studio, mallory_studio):
    for client in (charlie_studio, mallory_studio):
        error = rejected(lambda client=client: client.list_node_pods(NLP_0, studio.ListNodePodsRequest()))
        assert (error.status_code, error.code) == (404, "EntityNotExist.Node")


# --- OperateNode --------------------------------------------------------------------------------

def test_an_admin_cordons_and_uncordons_a_node_of_his_quota(bob_admin_studio):
    body = bob_admin_studio.operate_node(NLP_0, studio.OperateNodeRequest(operation="Cordon")).body
    assert body.node_id == NLP_0 and Node.objects.get(name=NLP_0).cordoned
    listed = bob_admin_studio.list_nodes(studio.ListNodesRequest(node_names=NLP_0)).body.nodes[0]
    assert (listed.node_status, listed.reason_code) == ("Ready", "Cordoned")
    bob_admin_studio.operate_node(NLP_0, studio.OperateNodeRequest(operation="Uncordon"))
    assert not Node.objects.get(name=NLP_0).cordoned


def test_draining_through_the_sdk_stops_the_nodes_pods(alice_studio, bob):
    pod = running(bob, NLP_0)
    alice_studio.operate_node(NLP_0, studio.OperateNodeRequest(operation="Drain"))
    pod.refresh_from_db()
    assert pod.terminating and pod.reason_code == "NodeDrained"
    assert Node.objects.get(name=NLP_0).cordoned


def test_operating_a_node_is_refused_to_members_and_other_tenants(bob_studio, charlie_studio, mallory_studio):
    assert rejected(lambda: bob_studio.operate_node(NLP_0, studio.OperateNodeRequest(operation="Cordon"))
                    ).status_code == 403
    for client in (charlie_studio, mallory_studio):
        error = rejected(lambda client=client: client.operate_node(NLP_0, studio.OperateNodeRequest(operation="Cordon")))
        assert (error.status_code, error.code) == (404, "EntityNotExist.Node")
    assert not Node.objects.get(name=NLP_0).cordoned


@pytest.mark.parametrize("request_, field", [
    (studio.OperateNodeRequest(), "Operation"),
    (studio.OperateNodeRequest(operation="Reboot"), "Operation"),
    (studio.OperateNodeRequest(operation="Cordon", resource_group_id="rg-other"), "ResourceGroupId"),
    (studio.OperateNodeRequest(operation="Drain", operation_parameters=studio.NodeOperationParameters(
        drain_parameters=studio.NodeDrainParameters(pod_names=["one"]))), "OperationParameters.DrainParameters.PodNames"),
])
def test_bad_operations_name_the_field(alice_studio, request_, field):
    error = rejected(lambda: alice_studio.operate_node(NLP_0, request_))
    assert (error.status_code, error.code) == (400, "InvalidParameter") and error.message.startswith(
        f"code: 400, {field}:")


# --- ListQuotaActiveUserUsages ------------------------------------------------------------------

def test_active_user_usages_sum_each_users_holding_pods(bob_studio, alice, bob):
    running(bob, NLP_0, gpus=8)
    running(bob, "nlp-team-gn6v-c8g1-1", gpus=2, name="small")
    running(alice, "cv-team-gn6v-c8g1-0", gpus=4, workspace="vision-lab", quota="cv-team", name="vision")
    nlp = Quota.objects.get(name="nlp-team")
    body = bob_studio.list_quota_active_user_usages(nlp.quota_id, studio.ListQuotaActiveUserUsagesRequest()).body
    assert body.total_count == 1
    usage = body.quota_user_usages[0]
    assert (usage.username, usage.workload_count, usage.resources.used.gpu) == ("bob", 2, "10")
    parent = Quota.objects.get(name="ml-platform")
    body = bob_studio.list_quota_active_user_usages(parent.quota_id, studio.ListQuotaActiveUserUsagesRequest(
        sort_by="GPU", order="desc")).body
    assert [(u.username, u.resources.used.gpu) for u in body.quota_user_usages] == [("bob", "10"), ("alice", "4")]


def test_active_user_usages_are_not_shown_across_the_wall(mallory_studio, charlie_studio, bob_studio, bob):
    running(bob, NLP_0)
    nlp = Quota.objects.get(name="nlp-team")
    for client in (mallory_studio, charlie_studio):
        error = rejected(lambda client=client: client.list_quota_active_user_usages(
            nlp.quota_id, studio.ListQuotaActiveUserUsagesRequest()))
        assert (error.status_code, error.code) == (404, "EntityNotExist.Quota")
    error = rejected(lambda: bob_studio.list_quota_active_user_usages(
        nlp.quota_id, studio.ListQuotaActiveUserUsagesRequest(workspace_id="abc")))
    assert error.status_code == 400 and "WorkspaceId" in error.message


# --- ListNodes: scope ---------------------------------------------------------------------------

def test_a_user_in_no_workspace_sees_no_node(charlie_studio):
    assert charlie_studio.list_nodes(studio.ListNodesRequest()).body.total_count == 0
    assert charlie_studio.list_resource_groups(studio.ListResourceGroupsRequest()).body.total_count == 0
    assert charlie_studio.list_node_types(studio.ListNodeTypesRequest()).body.statistics == []


def test_resource_group_filters_of_other_providers_and_versions(bob_studio):
    assert bob_studio.list_resource_groups(studio.ListResourceGroupsRequest(
        computing_resource_provider="ECS")).body.total_count == 0
    error = rejected(lambda: bob_studio.list_resource_groups(studio.ListResourceGroupsRequest(versions="v1")))
    assert error.status_code == 400 and "Versions: is not supported" in error.message


def test_node_pods_with_another_resource_group_are_refused(bob_studio):
    error = rejected(lambda: bob_studio.list_node_pods(NLP_0, studio.ListNodePodsRequest(resource_group_id="rg-x")))
    assert error.status_code == 400 and f"node {NLP_0} is in resource group rg-{V100}" in error.message


def test_a_resource_group_has_no_tags_to_filter_by(bob_studio):
    error = rejected(lambda: bob_studio.get_resource_group(f"rg-{V100}", studio.GetResourceGroupRequest(
        tag=[studio.GetResourceGroupRequestTag(key="team", value="nlp")])))
    assert error.status_code == 400 and "Tag: is not supported" in error.message


def test_aiworkspace_list_resources_on_the_same_path_is_not_answered_as_resource_groups(endpoint, alice):
    # Its client sends GET /api/v1/resources too; a ListResourceGroups answer would break it.
    from alibabacloud_aiworkspace20210204 import models as ws

    from tests.api.test_sdk_workspaces import workspace_client

    error = rejected(lambda: workspace_client(endpoint, alice).list_resources(ws.ListResourcesRequest()))
    assert (error.status_code, error.code) == (404, "InvalidAction.NotFound")


def test_list_nodes_filters_by_resource_group(bob_studio):
    nodes = bob_studio.list_nodes(studio.ListNodesRequest(resource_group_ids="rg-ecs.g7.xlarge", page_size=100)).body
    assert nodes.total_count > 0 and {n.node_type for n in nodes.nodes} == {"ecs.g7.xlarge"}
    assert {n.resource_group_id for n in nodes.nodes} == {"rg-ecs.g7.xlarge"}
