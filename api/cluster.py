"""PaiStudio 2022-01-12 admin actions on the cluster: ScaleQuota, ListResourceGroups,
GetResourceGroup, ListNodeTypes, ListNodePods, OperateNode, ListQuotaActiveUserUsages (keys as
docs/api-map.md lists them).

Who may see and change what, and the changes themselves, are quotas.services' (the console's Nodes
page calls the same operate_node); a resource group is the nodes of one instance type (see
quotas.services). Every read is of what the caller may see: nodes of their tenant's quotas and the
public pool, and on a node only the pods of jobs of their own workspaces.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Count, Q

from api.quotas import _call, _node_specs, _resources, get_visible_quota
from apikit import params
from apikit.errors import ApiError, invalid, not_found
from apikit.pagination import page_of
from apikit.schema import PAGING, sdk_action
from apikit.views import SdkView
from jobs.models import Pod
from jobs.services import visible_jobs
from jobs.usage import usage_by_user
from quotas import services
from quotas.models import ResourceSpec, ResourceType
from quotas.tree import subtrees


def _call_for_node(fn, *args, **kwargs):
    """api.quotas._call, and the node and resource group refusals, with the SDK's field names."""
    def named(*a, **k):
        try:
            return fn(*a, **k)
        except services.QuotaRefused as exc:
            raise services.QuotaRefused({"Operation" if f == "operation" else f: m for f, m in exc.errors.items()})
    try:
        return _call(named, *args, **kwargs)
    except services.NodeNotFound as exc:
        raise not_found("Node", exc.name) from None
    except services.ResourceGroupNotFound as exc:
        raise not_found("ResourceGroup", exc.group_id) from None


def _page(rows: list, q) -> list:
    page = page_of(q)
    return rows[page.offset : page.offset + page.size]


# --- ScaleQuota ---------------------------------------------------------------------------------

class ScaleQuotaView(SdkView):
    """PUT /api/v1/quotas/{QuotaId}/action/scale (ScaleQuota)."""

    @sdk_action("ScaleQuota", "Change a quota's Min: nodes of each listed type taken from or given back to "
                              "its pool", body=True)
    def put(self, request, quota_id):
        body = self.body(request)
        counts = _node_specs(body.get("Min"))
        if not counts:
            raise invalid("Min.NodeSpecs", "is required: a list of {Type, Count}, the nodes of each type wanted")
        _check_groups(request.user, body.get("ResourceGroupIds"), counts)
        quota = _call(services.scale_quota, request.user, quota_id, counts)
        return self.reply(request, {"QuotaId": quota.quota_id})


def _check_groups(user, group_ids, counts) -> None:
    """ResourceGroupIds, when given, are groups the caller sees, and hold every type of Min."""
    if not params.given(group_ids):
        return
    if not isinstance(group_ids, list) or not all(isinstance(g, str) for g in group_ids):
        raise invalid("ResourceGroupIds", "must be a list of resource group ids")
    groups = {g.group_id: g for g in services.visible_resource_groups(user)}
    if unknown := [g for g in group_ids if g not in groups]:
        raise invalid("ResourceGroupIds", f"no resource group {', '.join(unknown)}; known: {', '.join(groups)}")
    types = {groups[g].spec.instance_type for g in group_ids}
    for i, (instance_type, _) in enumerate(counts):
        if instance_type not in types:
            raise invalid(f"Min.NodeSpecs[{i}].Type", f"{instance_type!r} is not in the ResourceGroupIds given")


# --- ListResourceGroups, GetResourceGroup -------------------------------------------------------

PROVIDER = "Local"
RG_SORT = {"GmtCreatedTime": lambda g: (g.created_at, g.group_id), "Name": lambda g: g.group_id,
           "NodeCount": lambda g: (g.node_count, g.group_id)}


class ResourceGroupsView(SdkView):
    """GET /api/v1/resources (ListResourceGroups)."""

    # AIWorkspace's ListResources sends the same GET /api/v1/resources; its x-acs-action tells them
    # apart, and it is not served here (an answer of the wrong shape would break its client).
    only_actions = ("ListResourceGroups",)

    @sdk_action("ListResourceGroups", "The resource groups (one per instance type) of the nodes the caller sees",
                query=(*PAGING, "Name", "ResourceGroupIDs", "ResourceType", "Status", "HasResource", "ShowAll",
                       "ComputingResourceProvider"))
    def get(self, request):
        action = request.headers.get("x-acs-action", "ListResourceGroups")
        if action not in self.only_actions:
            raise ApiError("InvalidAction.NotFound", f"{action} is not an API action of this server.", status=404)
        q = request.query_params
        groups = services.visible_resource_groups(request.user)
        if name := params.text(q, "Name"):
            groups = [g for g in groups if name.lower() in g.group_id.lower()]
        if ids := params.listed(q, "ResourceGroupIDs"):
            groups = [g for g in groups if g.group_id in ids]
        if rtype := params.choice(q, "ResourceType", ResourceType.values):
            groups = [g for g in groups if g.spec.resource_type == rtype]
        if (status := params.choice(q, "Status", ("Ready", "Creating", "Deleting"))) and status != "Ready":
            groups = []
        params.boolean(q, "HasResource")  # every group listed has nodes
        params.boolean(q, "ShowAll")
        if (provider := params.text(q, "ComputingResourceProvider")) and provider != PROVIDER:
            groups = []  # every node here is the cluster's own
        if params.text(q, "Versions"):
            raise invalid("Versions", "is not supported: resource groups here have no versions")
        by = params.choice(q, "SortBy", RG_SORT, default="GmtCreatedTime")
        groups.sort(key=RG_SORT[by], reverse=params.order(q, default="desc") == "desc")
        return self.reply(request, {"ResourceGroups": [_group(g) for g in _page(groups, q)],
                                    "TotalCount": len(groups)})


class ResourceGroupView(SdkView):
    """GET /api/v1/resources/{ResourceGroupId} (GetResourceGroup)."""

    @sdk_action("GetResourceGroup", "One resource group: the nodes of one instance type",
                query=("IsAIWorkspaceDataEnabled", "Tag"))
    def get(self, request, group_id):
        if params.text(request.query_params, "Tag"):
            raise invalid("Tag", "is not supported: resource groups here have no tags")
        params.boolean(request.query_params, "IsAIWorkspaceDataEnabled")  # the answer is the same either way
        group = _call_for_node(services.resource_group_for_user, request.user, group_id)
        return self.reply(request, {**_group(group), "ClusterID": "opendlc", "ComputingResourceProvider": PROVIDER,
                                    "Description": f"{group.public_count} of {group.node_count} node(s) in the "
                                                   f"public pool", "SupportRDMA": False, "Tags": []})


def _group(group: services.ResourceGroup) -> dict:
    return {
        "ResourceGroupID": group.group_id,
        "Name": group.spec.instance_type,
        "ResourceType": group.spec.resource_type,
        "Status": "Ready",
        "NodeCount": group.node_count,
        "GmtCreatedTime": params.fmt_time(group.created_at),
        "GmtModifiedTime": params.fmt_time(group.modified_at),
    }


# --- ListNodeTypes ------------------------------------------------------------------------------

class NodeTypesView(SdkView):
    """GET /api/v1/nodetypes (ListNodeTypes)."""

    @sdk_action("ListNodeTypes", "Instance types, with how many of the caller's visible nodes each has",
                query=("AcceleratorType", "GPUType", "NodeTypes", "QuotaId", "ResourceGroupIds"))
    def get(self, request):
        q = request.query_params
        specs = ResourceSpec.objects.all()
        nodes = services.visible_nodes(request.user)
        if accelerator := params.choice(q, "AcceleratorType", ("CPU", "GPU"), case_insensitive=True):
            specs = specs.filter(gpu__gt=0) if accelerator == "GPU" else specs.filter(gpu=0)
        if gpu_type := params.text(q, "GPUType"):
            specs = specs.filter(gpu_type__icontains=gpu_type)
        if types := params.listed(q, "NodeTypes"):
            specs = specs.filter(instance_type__in=types)
        if quota_id := params.text(q, "QuotaId"):
            quota = get_visible_quota(request.user, quota_id)
            nodes = nodes.filter(quota__in=subtrees()[quota.pk])
            specs = specs.filter(pk__in=nodes.values("spec"))
        if groups := params.listed(q, "ResourceGroupIds"):
            prefix = services.RESOURCE_GROUP_PREFIX
            specs = specs.filter(instance_type__in=[g.removeprefix(prefix) for g in groups if g.startswith(prefix)])
        counts = {r["spec"]: r for r in nodes.filter(spec__in=specs).values("spec").annotate(
            total=Count("pk"), free=Count("pk", filter=Q(quota__isnull=True))).order_by()}
        return self.reply(request, {
            "NodeTypes": [_node_type(s) for s in specs],
            "Statistics": [{"NodeType": s.instance_type, "TotalCount": counts[s.pk]["total"],
                            "CanBeBoundCount": counts[s.pk]["free"]} for s in specs if s.pk in counts],
        })


def _node_type(spec: ResourceSpec) -> dict:
    return {
        "NodeType": spec.instance_type,
        "AcceleratorType": "GPU" if spec.gpu else "CPU",
        "CPU": str(spec.cpu), "Memory": params.memory_amount(spec.memory_mib),
        "GPU": str(spec.gpu), "GPUType": spec.gpu_type,
        "AllocatableCPU": str(spec.cpu), "AllocatableMemory": params.memory_amount(spec.memory_mib),
    }


# --- ListNodePods, OperateNode ------------------------------------------------------------------

class NodePodsView(SdkView):
    """GET /api/v1/nodes/{NodeId}/Pods (ListNodePods): the pods holding the node, of the caller's jobs."""

    @sdk_action("ListNodePods", "The pods holding capacity on a node, of jobs the caller may see",
                query=("OversoldTypes", "GPUIndexes", "ResourceGroupId"))
    def get(self, request, node_id):
        q = request.query_params
        node = _call_for_node(services.node_for_user, request.user, node_id)
        _check_group(node, params.text(q, "ResourceGroupId"))
        # Pods of other workspaces' jobs (on a public pool node, other tenants') are not named.
        pods = (Pod.objects.holding().filter(node=node, job__in=visible_jobs(request.user))
                .select_related("job").order_by("pod_id"))
        if oversold := params.listed(q, "OversoldTypes"):
            pods = [p for p in pods if ("AcceptQuotaOverSold" if p.kind == "idle" else "ForbiddenQuotaOverSold")
                    in oversold]
        if gpus := params.listed(q, "GPUIndexes"):
            pods = [p for p in pods if {str(g) for g in p.gpu_indices} & set(gpus)]
        return self.reply(request, {"NodePodInfos": [_pod(p) for p in pods]})


def _no_parameters(parameters) -> None:
    """OperationParameters' options (a cordon's comment, a drain of some pods only, a forced drain)
    are not supported: each given one is refused, not ignored."""
    if not params.given(parameters):
        return
    if not isinstance(parameters, dict):
        raise invalid("OperationParameters", "must be an object")
    for group, options in parameters.items():
        given = [k for k, v in options.items() if params.given(v)] if isinstance(options, dict) else [""]
        if given:
            field = ".".join(filter(None, ("OperationParameters", group, given[0])))
            raise invalid(field, "is not supported: a cordon takes no options, and a drain stops every pod of "
                                 "the node with its grace period")


def _check_group(node, group_id) -> None:
    """A ResourceGroupId given with a node must be the node's own group."""
    own = services.RESOURCE_GROUP_PREFIX + node.spec.instance_type
    if group_id and group_id != own:
        raise invalid("ResourceGroupId", f"node {node.name} is in resource group {own}, got {group_id!r}")


def _pod(pod: Pod) -> dict:
    return {
        "PodName": pod.pod_id, "PodNamespace": str(pod.job.workspace_id),
        "Phase": pod.status, "PodIP": "", "GPUIndexes": [str(g) for g in pod.gpu_indices],
        "WorkloadId": pod.job.job_id, "WorkloadType": "dlc",
        "ResourceSpec": {"CPU": params.cpu_amount(pod.cpu_m), "Memory": params.memory_amount(pod.mem_mib),
                         "GPU": str(pod.gpu)},
    }


class NodeView(SdkView):
    """POST /api/v1/nodes/{NodeId} (OperateNode): Cordon, Uncordon or Drain."""

    @sdk_action("OperateNode", "Cordon (no new pods), Uncordon, or Drain (cordon and stop its pods with "
                               "their grace period)", body=True)
    def post(self, request, node_id):
        body = self.body(request)
        operation = body.get("Operation")
        if not params.given(operation):
            raise invalid("Operation", f"is required: one of {', '.join(services.NODE_OPERATIONS)}")
        _no_parameters(body.get("OperationParameters"))
        if params.given(body.get("ResourceGroupId")):
            _check_group(_call_for_node(services.node_for_user, request.user, node_id), body["ResourceGroupId"])
        node = _call_for_node(services.operate_node, request.user, node_id, operation)
        return self.reply(request, {"NodeId": node.name})


# --- ListQuotaActiveUserUsages ------------------------------------------------------------------

USER_SORT = {"GPU": lambda u: int(u["Resources"]["Used"]["GPU"]), "UserId": lambda u: u["UserId"],
             "Username": lambda u: u["Username"], "WorkloadCount": lambda u: u["WorkloadCount"]}


class QuotaActiveUserUsagesView(SdkView):
    """GET /api/v1/quotas/{QuotaId}/activeuserusages (ListQuotaActiveUserUsages)."""

    @sdk_action("ListQuotaActiveUserUsages", "Per user with unfinished jobs in the quota (and its sub-quotas): "
                                             "what their pods hold and ask for", query=(
        *PAGING, "UserId", "Username", "WorkspaceId", "SelfOnly", "WorkloadCount"))
    def get(self, request, quota_id):
        q = request.query_params
        quota = get_visible_quota(request.user, quota_id)
        tree = {quota.pk} if params.boolean(q, "SelfOnly", default=False) else subtrees()[quota.pk]
        workspace = params.text(q, "WorkspaceId")
        if workspace is not None and not params.ident(workspace):
            raise invalid("WorkspaceId", f"must be a workspace id (a number), got {workspace!r}")
        usage = usage_by_user(tree, workspace=params.ident(workspace) if workspace else None)
        users = get_user_model().objects.in_bulk(list(usage))
        rows = [_user_usage(users[pk], u) for pk, u in usage.items()]
        if user_id := params.text(q, "UserId"):
            rows = [r for r in rows if r["UserId"] == user_id]
        if name := params.text(q, "Username"):
            rows = [r for r in rows if name.lower() in r["Username"].lower()]
        if (least := params.integer(q, "WorkloadCount", low=0)) is not None:
            rows = [r for r in rows if r["WorkloadCount"] >= least]
        by = params.choice(q, "SortBy", USER_SORT, default="Username")
        rows.sort(key=lambda r: (USER_SORT[by](r), r["UserId"]), reverse=params.order(q, default="asc") == "desc")
        return self.reply(request, {"QuotaUserUsages": _page(rows, q), "TotalCount": len(rows)})


def _user_usage(user, usage) -> dict:
    return {"UserId": str(user.pk), "Username": user.username, "WorkloadCount": usage.workloads,
            "Resources": {"Used": _resources(usage.used), "Submitted": _resources(usage.submitted)}}

