"""PaiStudio 2022-01-12 quota and node actions: CreateQuota, GetQuota, ListQuotas, UpdateQuota,
DeleteQuota, ListNodes, ListQuotaWorkloads (keys as docs/api-map.md lists them).

A quota's Min is the nodes assigned to it and to its sub-quotas. Who may see and change which quota,
and the changes themselves, are quotas.services' (the console calls the same functions); this module
parses the SDK's requests and turns the service's refusals into SDK errors.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from django.db.models import Count

from apikit import params
from apikit.errors import ApiError, forbidden, invalid, invalid_fields, not_found
from apikit.pagination import page_of, paginate
from apikit.schema import PAGING, sdk_action
from apikit.views import SdkView
from jobs.models import Job, Pod
from jobs.states import FINAL, WAITING
from jobs.usage import usage_by_quota
from quotas import services
from quotas.models import Node, QueueStrategy, Quota, ResourceSpec, ResourceType
from quotas.services import visible_nodes, visible_quotas
from quotas.tree import subtrees

QUOTA_SORT = ("QuotaName", "Status", "CPU", "Memory", "GPU", "GmtCreatedTime", "GmtModifiedTime")


# --- who may see and change what ---------------------------------------------------------------

def get_visible_quota(user, quota_id: str) -> Quota:
    return _call(services.quota_for_user, user, quota_id)


API_FIELDS = {
    "name": "QuotaName", "description": "Description", "parent": "ParentQuotaId", "resource_type": "ResourceType",
    "queue_strategy": "QueueStrategy", "allow_priority_preemption": "QuotaConfig.EnableSelfQuotaPreemption",
    "backfill": "QuotaConfig.EnableBackfill", "weight": "QuotaConfig.FairShareWeight", "labels": "Labels",
}
# QuotaConfig keys of ours, not the SDK's (its QuotaConfig model leaves them out of a request it
# builds, and skips them in a response): the scheduling settings of scheduler/reservation.py and
# scheduler/fair_share.py, for a client that sends the body itself.
CONFIG_FIELDS = {"EnableSelfQuotaPreemption": "allow_priority_preemption", "EnableBackfill": "backfill",
                 "FairShareWeight": "weight"}
NODE_SPEC_KEY = re.compile(r"node_specs\[(\d+)\]\.(type|count)")


def _api_field(key: str) -> str:
    if match := NODE_SPEC_KEY.fullmatch(key):
        return f"Min.NodeSpecs[{match[1]}].{match[2].capitalize()}"
    return API_FIELDS.get(key, key)


def _call(fn, *args, **kwargs):
    """Run a quota service function; its refusals become the SDK's 404 / 403 / 400."""
    try:
        return fn(*args, **kwargs)
    except services.QuotaNotFound as exc:
        raise not_found("Quota", exc.quota_id) from None
    except services.QuotaForbidden as exc:
        raise forbidden(str(exc)) from None
    except services.QuotaRefused as exc:
        raise invalid_fields({_api_field(k): v for k, v in exc.errors.items()}) from None
    except services.QuotaInUse as exc:
        raise ApiError("QuotaInUse", str(exc)) from None


# --- shaping: the Quota model of the SDK ---------------------------------------------------------

class QuotaTree:
    """Every quota of the given set with its subtree's nodes and usage, loaded in a fixed number of
    queries, however many quotas. The usage is jobs.usage's, as on the console's Quotas page:
    UsedQuota (= AllocatedQuota) is what guaranteed pods of the quota and its sub-quotas hold of its
    guarantee; LentQuota and BorrowedQuota, which the SDK does not parse, what idle pods borrow."""

    def __init__(self, quotas):
        self.quotas = {q.pk: q for q in quotas}
        self.children = defaultdict(list)
        for q in Quota.objects.filter(parent__in=list(self.quotas)).only("pk", "quota_id", "name", "parent"):
            self.children[q.parent_id].append(q)
        self.subtrees = subtrees()
        self.nodes = _nodes_by_quota()
        self.usage = usage_by_quota()
        self.workspaces = defaultdict(list)
        for q in Quota.workspaces.through.objects.filter(quota__in=list(self.quotas)).select_related("workspace"):
            self.workspaces[q.quota_id].append(q.workspace)

    def shape(self, quota: Quota) -> dict:
        ids = self.subtrees[quota.pk]
        min_nodes = Counter()
        for pk in ids:
            min_nodes.update(self.nodes.get(pk, Counter()))
        total = _amount(sum((_spec_amount(spec, n) for spec, n in min_nodes.items()), Counter()))
        usage = self.usage[quota.pk]
        used = _resources(usage.guaranteed_used)
        gpu_types = sorted({spec.gpu_type for spec in min_nodes if spec.gpu_type})
        return {
            "QuotaId": quota.quota_id,
            "QuotaName": quota.name,
            "Description": quota.description,
            "ParentQuotaId": quota.parent.quota_id if quota.parent_id else None,
            "ResourceType": quota.resource_type,
            "QueueStrategy": quota.queue_strategy,
            "AllocateStrategy": "ByNodeSpecs",
            "Status": "Ready",
            "GPUType": ",".join(gpu_types),
            "GmtCreatedTime": params.fmt_time(quota.created_at),
            "GmtModifiedTime": params.fmt_time(quota.updated_at),
            "Labels": quota.labels,
            "Min": {"NodeSpecs": [
                {"Type": spec.instance_type, "Count": n}
                for spec, n in sorted(min_nodes.items(), key=lambda kv: kv[0].instance_type)
            ]},
            "QuotaDetails": {
                "DesiredMinQuota": total, "ActualMinQuota": total, "AllocatableQuota": total,
                "UsedQuota": used, "AllocatedQuota": used, "SelfAllocatedQuota": _resources(usage.self_used),
                "DescendantsAllocatedQuota": _resources(usage.descendants_used),
                # Not in the SDK's QuotaDetails (its parser skips them): idle pods of other quotas
                # on this quota's nodes, and this quota's idle pods on other quotas' nodes.
                "LentQuota": _resources(usage.lent), "BorrowedQuota": _resources(usage.borrowed),
                "NodeStatistics": {"ActualMinNodeNum": sum(min_nodes.values()),
                                   "AllocatedNodeNum": sum(min_nodes.values())},
            },
            "QuotaConfig": {
                "EnableSelfQuotaPreemption": quota.allow_priority_preemption,
                "EnablePreemptSubquotaWorkloads": False,
                "EnableBackfill": quota.backfill,
                "FairShareWeight": str(quota.weight),
            },
            "SubQuotas": [{"QuotaId": c.quota_id, "QuotaName": c.name} for c in self.children.get(quota.pk, [])],
            "Workspaces": [
                {"WorkspaceId": str(w.pk), "WorkspaceName": w.name} for w in self.workspaces.get(quota.pk, [])
            ],
        }


def _nodes_by_quota() -> dict[int, Counter]:
    specs = {s.pk: s for s in ResourceSpec.objects.all()}
    out = defaultdict(Counter)
    for row in Node.objects.filter(quota__isnull=False).values("quota", "spec").annotate(n=Count("pk")):
        out[row["quota"]][specs[row["spec"]]] += row["n"]
    return out


def _spec_amount(spec, n: int) -> Counter:
    """n pods of this shape (a ResourceSpec, or a JobSpec's PodResources)."""
    return Counter(cpu_m=spec.cpu_m * n, mem_mib=spec.memory_mib * n, gpu=spec.gpu * n)


def _resources(r) -> dict:
    """A jobs.usage figure (scheduler.Resources) as the SDK's ResourceAmount."""
    return _amount(Counter(cpu_m=r.cpu_m, mem_mib=r.mem_mib, gpu=r.gpu))


def _amount(total: Counter) -> dict:
    return {
        "CPU": params.cpu_amount(total["cpu_m"]),
        "Memory": params.memory_amount(total["mem_mib"]),
        "GPU": str(total["gpu"]),
    }


# --- actions -------------------------------------------------------------------------------------

class QuotasView(SdkView):
    """POST /api/v1/quotas (CreateQuota), GET /api/v1/quotas/ (ListQuotas)."""

    @sdk_action("ListQuotas", "Quotas of the caller's tenant", query=(
        *PAGING, "QuotaName", "QuotaIds", "ParentQuotaId", "ResourceType", "WorkspaceIds", "Statuses", "Labels"))
    def get(self, request):
        q = request.query_params
        quotas = _filtered_quotas(request.user, q)
        tree = QuotaTree(quotas)
        shaped = [tree.shape(quota) for quota in quotas]
        shaped.sort(key=_quota_sort_key(params.choice(q, "SortBy", QUOTA_SORT, default="GmtCreatedTime")),
                    reverse=params.order(q, default="asc") == "desc")
        page = page_of(q)
        return self.reply(request, {"Quotas": shaped[page.offset : page.offset + page.size], "TotalCount": len(shaped)})

    @sdk_action("CreateQuota", "Create a quota; Min.NodeSpecs takes free nodes from the parent or the public pool",
                body=True)
    def post(self, request):
        quota = _call(services.create_quota, request.user, _quota_request(self.body(request)))
        return self.reply(request, {"QuotaId": quota.quota_id})


class QuotaView(SdkView):
    """GET (GetQuota), PUT (UpdateQuota), DELETE (DeleteQuota) /api/v1/quotas/{QuotaId}."""

    @sdk_action("GetQuota", "One quota with its nodes, usage, sub-quotas and workspaces")
    def get(self, request, quota_id):
        quota = get_visible_quota(request.user, quota_id)
        return self.reply(request, QuotaTree([quota]).shape(quota))

    @sdk_action("UpdateQuota", "Rename or re-describe a quota, change its queue strategy", body=True)
    def put(self, request, quota_id):
        quota = _call(services.update_quota, request.user, quota_id, **_quota_changes(self.body(request)))
        return self.reply(request, {"QuotaId": quota.quota_id})

    @sdk_action("DeleteQuota", "Delete a quota without sub-quotas or jobs; its nodes go back to the parent")
    def delete(self, request, quota_id):
        _call(services.delete_quota, request.user, quota_id)
        return self.reply(request, {"QuotaId": quota_id})


def _filtered_quotas(user, q) -> list[Quota]:
    quotas = visible_quotas(user)
    if "ParentQuotaId" in q:  # absent: every quota; empty: root quotas; else: that quota's children
        parent = (q.get("ParentQuotaId") or "").strip()
        quotas = quotas.filter(parent__quota_id=parent) if parent else quotas.filter(parent__isnull=True)
    if name := params.text(q, "QuotaName"):
        quotas = quotas.filter(name__icontains=name)
    if ids := params.listed(q, "QuotaIds"):
        quotas = quotas.filter(quota_id__in=ids)
    if rtype := params.choice(q, "ResourceType", ResourceType.values):
        quotas = quotas.filter(resource_type=rtype)
    if workspaces := params.listed(q, "WorkspaceIds"):
        quotas = quotas.filter(workspaces__pk__in=[params.ident(w) for w in workspaces]).distinct()
    if (statuses := params.listed(q, "Statuses")) and "Ready" not in statuses:
        quotas = quotas.none()
    wanted = [(k.strip(), v.strip() if sep else None) for k, sep, v in
              (label.partition("=") for label in params.listed(q, "Labels"))]
    return [quota for quota in quotas if services.has_labels(quota, wanted)]


def _quota_sort_key(sort_by: str):
    def number(value: str) -> float:
        value = value.removesuffix("Gi").removesuffix("Mi")
        return float(value[:-1]) / 1000 if value.endswith("m") else float(value)

    return {
        "QuotaName": lambda s: s["QuotaName"],
        "Status": lambda s: (s["Status"], s["GmtCreatedTime"]),
        "CPU": lambda s: number(s["QuotaDetails"]["ActualMinQuota"]["CPU"]),
        "Memory": lambda s: number(s["QuotaDetails"]["ActualMinQuota"]["Memory"]),
        "GPU": lambda s: number(s["QuotaDetails"]["ActualMinQuota"]["GPU"]),
        "GmtCreatedTime": lambda s: (s["GmtCreatedTime"], s["QuotaId"]),
        "GmtModifiedTime": lambda s: (s["GmtModifiedTime"], s["QuotaId"]),
    }[sort_by]


# --- CreateQuota / UpdateQuota: the SDK's body as the service's values ----------------------------

LEAF = params.LEAF
# Every key UpdateQuota and CreateQuota read (apikit.params.unsupported's shape); any other that asks
# for something is refused by name. tests/api/test_sdk_fields.py walks the SDK's requests against them.
UPDATE_QUOTA_SHAPE = {
    **dict.fromkeys(("QuotaName", "Description", "QueueStrategy"), LEAF),
    "Labels": [{"Key": LEAF, "Value": LEAF}],
    "QuotaConfig": dict.fromkeys(CONFIG_FIELDS, LEAF),
}
CREATE_QUOTA_SHAPE = {
    **UPDATE_QUOTA_SHAPE,
    **dict.fromkeys(("ParentQuotaId", "ResourceType", "AllocateStrategy"), LEAF),
    "Min": {"NodeSpecs": [{"Type": LEAF, "Count": LEAF}]},
}


def _refuse_unsupported(body: dict, shape: dict) -> None:
    if paths := params.unsupported(body, shape):
        raise invalid_fields(dict.fromkeys(paths, "is not supported by this platform; leave it out"))


def _quota_request(body: dict) -> services.QuotaRequest:
    def given(key, default):
        return body[key] if params.given(body.get(key)) else default

    _refuse_unsupported(body, CREATE_QUOTA_SHAPE)
    if given("AllocateStrategy", "ByNodeSpecs") != "ByNodeSpecs":
        raise invalid("AllocateStrategy", f"must be ByNodeSpecs (a quota holds whole nodes), got {body['AllocateStrategy']!r}")

    parent_id = body.get("ParentQuotaId")
    return services.QuotaRequest(
        name=body.get("QuotaName"),
        parent_id=str(parent_id) if params.given(parent_id) else None,
        description=given("Description", ""),
        resource_type=given("ResourceType", None),
        queue_strategy=given("QueueStrategy", QueueStrategy.BEST_EFFORT),
        **_config(body.get("QuotaConfig"), {"allow_priority_preemption": False}),
        node_counts=_node_specs(body.get("Min")),
        labels=given("Labels", ()),
    )


def _quota_changes(body: dict) -> dict:
    """UpdateQuota changes only what the body gives."""
    _refuse_unsupported(body, UPDATE_QUOTA_SHAPE)
    changes = {}
    if params.given(body.get("Labels")):  # the SDK sends [] when none are given: that changes nothing
        changes["labels"] = body["Labels"]
    if params.given(body.get("QuotaName")):
        changes["name"] = body["QuotaName"]
    if body.get("Description") is not None:
        changes["description"] = body["Description"]
    if params.given(body.get("QueueStrategy")):
        changes["queue_strategy"] = body["QueueStrategy"]
    changes.update(_config(body.get("QuotaConfig"), {}))
    return changes


def _config(config, defaults: dict) -> dict:
    """The QuotaConfig keys given, as quota fields, over `defaults` (the service checks them)."""
    if not params.given(config):
        return dict(defaults)
    if not isinstance(config, dict):
        raise invalid("QuotaConfig", "must be an object")
    return {**defaults, **{field: config[key] for key, field in CONFIG_FIELDS.items() if config.get(key) is not None}}


def _node_specs(min_spec) -> tuple[tuple, ...]:
    """Min.NodeSpecs as (Type, Count) pairs; the service checks the types and counts."""
    if not params.given(min_spec):
        return ()
    if not isinstance(min_spec, dict):
        raise invalid("Min", "must be an object with NodeSpecs: [{Type, Count}]")
    node_specs = min_spec.get("NodeSpecs") or []
    if not isinstance(node_specs, list):
        raise invalid("Min.NodeSpecs", "must be a list of {Type, Count}")
    items = [item if isinstance(item, dict) else {} for item in node_specs]
    return tuple((item.get("Type"), item.get("Count")) for item in items)


# --- ListNodes ----------------------------------------------------------------------------------

NODE_SORT = {"NodeName": "name", "GmtCreateTime": "created_at", "GmtCreatedTime": "created_at",
             "NodeType": "spec__instance_type", "NodeStatus": "status"}


class NodesView(SdkView):
    """GET /api/v1/nodes (ListNodes)."""

    @sdk_action("ListNodes", "Nodes with what runs on them", query=(
        *PAGING, "QuotaId", "FilterByQuotaId", "NodeNames", "NodeStatuses", "NodeTypes", "GPUType",
        "AcceleratorType", "WorkspaceId", "ResourceGroupIds", "FilterByResourceGroupIds"))
    def get(self, request):
        q = request.query_params
        nodes = _filtered_nodes(request.user, q)
        field = NODE_SORT[params.choice(q, "SortBy", NODE_SORT, default="NodeName")]
        nodes = nodes.order_by(("-" if params.order(q, default="asc") == "desc" else "") + field, "pk")
        rows, total = paginate(nodes, page_of(q))
        pods = _pods_by_node(rows)
        # Users of other workspaces (on a public pool node, of other tenants) are not named.
        named = None if request.user.is_staff else set(request.user.memberships.values_list("workspace", flat=True))
        return self.reply(request, {"Nodes": [_node(n, pods.get(n.pk, []), named) for n in rows],
                                    "TotalCount": total})


def _filtered_nodes(user, q):
    nodes = visible_nodes(user).select_related("spec", "quota")
    quota_id = params.text(q, "QuotaId") or params.text(q, "FilterByQuotaId")
    if quota_id:
        quota = get_visible_quota(user, quota_id)
        nodes = nodes.filter(quota__in=_subtree_ids(quota))
    if names := params.listed(q, "NodeNames"):
        nodes = nodes.filter(name__in=names)
    if statuses := params.listed(q, "NodeStatuses"):
        nodes = nodes.filter(status__in=statuses)
    if types := params.listed(q, "NodeTypes"):
        nodes = nodes.filter(spec__instance_type__in=types)
    if groups := params.listed(q, "ResourceGroupIds") or params.listed(q, "FilterByResourceGroupIds"):
        prefix = services.RESOURCE_GROUP_PREFIX  # a resource group is the nodes of one instance type
        nodes = nodes.filter(spec__instance_type__in=[g.removeprefix(prefix) for g in groups if g.startswith(prefix)])
    if gpu_type := params.text(q, "GPUType"):
        nodes = nodes.filter(spec__gpu_type__icontains=gpu_type)
    if accelerator := params.choice(q, "AcceleratorType", ("CPU", "GPU"), case_insensitive=True):
        nodes = nodes.filter(spec__gpu__gt=0) if accelerator == "GPU" else nodes.filter(spec__gpu=0)
    if workspace := params.text(q, "WorkspaceId"):
        bound = Quota.objects.filter(workspaces__pk=params.ident(workspace))
        tree = subtrees()
        nodes = nodes.filter(quota__in=[pk for quota in bound for pk in tree[quota.pk]])
    return nodes


def _subtree_ids(quota: Quota) -> set[int]:
    return subtrees()[quota.pk]


def _pods_by_node(nodes) -> dict[int, list[Pod]]:
    out = defaultdict(list)
    pods = Pod.objects.holding().filter(node__in=nodes).select_related("job__user")
    for pod in pods:
        out[pod.node_id].append(pod)
    return out


def _node(node: Node, pods: list[Pod], named_workspaces: set[int] | None) -> dict:
    spec = node.spec
    users = {pod.job.user_id: pod.job.user.username for pod in pods
             if named_workspaces is None or pod.job.workspace_id in named_workspaces}
    created = params.fmt_time(node.created_at)
    return {
        "NodeName": node.name,
        "NodeType": spec.instance_type,
        "NodeStatus": node.status,
        "AcceleratorType": "GPU" if spec.gpu else "CPU",
        "GPUType": spec.gpu_type,
        "CPU": str(spec.cpu),
        "Memory": params.memory_amount(spec.memory_mib),
        "GPU": str(spec.gpu),
        "AllocatableCPU": str(spec.cpu),
        "AllocatableMemory": params.memory_amount(spec.memory_mib),
        "RequestCPU": params.cpu_amount(sum(p.cpu_m for p in pods)),
        "RequestMemory": params.memory_amount(sum(p.mem_mib for p in pods)),
        "RequestGPU": str(sum(p.gpu for p in pods)),
        "PodNum": len(pods),
        "WorkloadNum": len({p.job_id for p in pods}),
        "IsBound": node.quota_id is not None,
        "BoundQuotas": [{"QuotaId": node.quota.quota_id, "QuotaName": node.quota.name}] if node.quota_id else [],
        "Users": [{"UserId": str(uid), "UserName": name} for uid, name in sorted(users.items())],
        "GmtCreateTime": created,
        "GmtCreatedTime": created,
        "ResourceGroupName": node.pool_label,
        "ResourceGroupId": services.RESOURCE_GROUP_PREFIX + spec.instance_type,
        # A cordoned node is Ready (its agent is alive) but takes no new pods.
        "ReasonCode": "Cordoned" if node.cordoned else None,
        "ReasonMessage": "Cordoned: takes no new pods; its pods keep running" if node.cordoned else None,
    }


# --- ListQuotaWorkloads -------------------------------------------------------------------------

class QuotaWorkloadsView(SdkView):
    """GET /api/v1/quotas/{QuotaId}/workloads (ListQuotaWorkloads): the quota's queue and its running jobs."""

    @sdk_action("ListQuotaWorkloads", "The quota's queue and running jobs", query=(
        *PAGING, "WorkloadStatuses", "Status", "WorkloadIds", "WorkloadNames", "UserIds", "Priority",
        "UseOversoldResource", "WithHistoricalData"))
    def get(self, request, quota_id):
        q = request.query_params
        quota = get_visible_quota(request.user, quota_id)
        rows, total = paginate(quota_workloads(request.user, quota, q), page_of(q))
        return self.reply(request, {"Workloads": [_workload(job) for job in rows], "TotalCount": total})


def quota_workloads(user, quota: Quota, q):
    """The jobs of the quota's tree that the user may see, filtered and sorted as asked, with what
    _workload reads of them (their roles and shapes) fetched per page, not per job."""
    from jobs.services import visible_jobs

    jobs = (visible_jobs(user).filter(quota__in=_subtree_ids(quota))
            .select_related("workspace", "user", "quota").prefetch_related("specs__spec"))
    return _filtered_workloads(jobs, q)


def _filtered_workloads(jobs, q):
    if not params.boolean(q, "WithHistoricalData", default=False):
        jobs = jobs.exclude(status__in=FINAL)
    if statuses := params.listed(q, "WorkloadStatuses"):
        jobs = jobs.filter(status__in=statuses)
    if status := params.choice(q, "Status", ("Enqueued", "Dequeued")):
        jobs = jobs.filter(status__in=WAITING) if status == "Enqueued" else jobs.exclude(status__in=WAITING)
    if ids := params.listed(q, "WorkloadIds"):
        jobs = jobs.filter(job_id__in=ids)
    if names := params.listed(q, "WorkloadNames"):
        jobs = jobs.filter(display_name__in=names)
    if users := params.listed(q, "UserIds"):
        jobs = jobs.filter(user__pk__in=[params.ident(u) for u in users])
    if (priority := params.integer(q, "Priority")) is not None:
        jobs = jobs.filter(priority=priority)
    if (oversold := params.boolean(q, "UseOversoldResource")) is not None:
        jobs = jobs.filter(use_oversold_resource=oversold)
    by = params.choice(q, "SortBy", ("GmtEnqueuedTime", "Position", "Priority"), default="GmtEnqueuedTime")
    field = {"GmtEnqueuedTime": "created_at", "Position": "queue_position", "Priority": "priority"}[by]
    return jobs.order_by(("-" if params.order(q, default="asc") == "desc" else "") + field, "pk")


def _workload(job: Job) -> dict:
    resource = sum((_spec_amount(s.shape, s.pod_count) for s in job.specs.all()), Counter())
    waiting = job.status in WAITING
    return {
        "WorkloadId": job.job_id,
        "WorkloadName": job.display_name,
        "WorkloadType": "dlc",
        "Status": "Enqueued" if waiting else "Dequeued",
        "WorkloadStatus": job.status,
        "QuotaId": job.quota.quota_id if job.quota_id else None,
        "Position": job.queue_position if waiting else None,
        "Priority": job.priority,
        "QueueStrategy": job.quota.queue_strategy if job.quota_id else None,
        "UseOversoldResource": job.use_oversold_resource,
        "Resource": _amount(resource),
        "Reason": job.wait_reason,
        "UserId": str(job.user_id),
        "UserName": job.user.username,
        "WorkspaceId": str(job.workspace_id),
        "WorkspaceName": job.workspace.name,
        "GmtCreatedTime": params.fmt_time(job.created_at),
        "GmtEnqueuedTime": params.fmt_time(job.submitted_at or job.created_at),
        "GmtDequeuedTime": params.fmt_time(job.running_at) if not waiting else None,
    }
