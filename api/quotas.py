"""PaiStudio 2022-01-12 quota and node actions: CreateQuota, GetQuota, ListQuotas, UpdateQuota,
DeleteQuota, ListNodes, ListQuotaWorkloads (keys as docs/api-map.md lists them).

A quota's Min is the nodes assigned to it and to its sub-quotas. Anyone of a tenant reads that
tenant's quotas; changing one needs a staff user or an owner/admin of a workspace bound to the
quota or to one of its ancestors (creating a root quota needs staff).
"""

from __future__ import annotations

import secrets
from collections import Counter, defaultdict

from django.db import transaction
from django.db.models import Count

from apikit import params
from apikit.errors import ApiError, forbidden, invalid, invalid_fields, not_found
from apikit.pagination import page_of, paginate
from apikit.schema import PAGING, sdk_action
from apikit.views import SdkView
from jobs.models import Job, Pod
from jobs.states import FINAL, WAITING
from jobs.usage import usage_by_quota
from quotas.models import (
    Membership, Node, NodeStatus, QueueStrategy, Quota, ResourceSpec, ResourceType, Role, Workspace,
)
from quotas.tree import subtrees

QUOTA_SORT = ("QuotaName", "Status", "CPU", "Memory", "GPU", "GmtCreatedTime", "GmtModifiedTime")


# --- who may see and change what ---------------------------------------------------------------

def visible_quotas(user):
    quotas = Quota.objects.select_related("parent")
    if user.is_staff:
        return quotas
    return quotas.filter(tenant__in=Workspace.objects.filter(memberships__user=user).values("tenant"))


def lineage(quota: Quota) -> list[Quota]:
    """The quota and its ancestors, root last."""
    chain = [quota]
    while chain[-1].parent_id:
        chain.append(chain[-1].parent)
    return chain


def can_administer(user, quota: Quota) -> bool:
    if user.is_staff:
        return True
    return Membership.objects.filter(
        user=user, role__in=(Role.OWNER, Role.ADMIN), workspace__quotas__in=lineage(quota)
    ).exists()


def get_visible_quota(user, quota_id: str) -> Quota:
    quota = visible_quotas(user).filter(quota_id=quota_id).first()
    if quota is None:
        raise not_found("Quota", quota_id)
    return quota


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
            "Labels": [],
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
        *PAGING, "QuotaName", "QuotaIds", "ParentQuotaId", "ResourceType", "WorkspaceIds", "Statuses"))
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
        quota = create_quota(request.user, self.body(request))
        return self.reply(request, {"QuotaId": quota.quota_id})


class QuotaView(SdkView):
    """GET (GetQuota), PUT (UpdateQuota), DELETE (DeleteQuota) /api/v1/quotas/{QuotaId}."""

    @sdk_action("GetQuota", "One quota with its nodes, usage, sub-quotas and workspaces")
    def get(self, request, quota_id):
        quota = get_visible_quota(request.user, quota_id)
        return self.reply(request, QuotaTree([quota]).shape(quota))

    @sdk_action("UpdateQuota", "Rename or re-describe a quota, change its queue strategy", body=True)
    def put(self, request, quota_id):
        quota = get_visible_quota(request.user, quota_id)
        _require_admin(request.user, quota)
        update_quota(quota, self.body(request))
        return self.reply(request, {"QuotaId": quota.quota_id})

    @sdk_action("DeleteQuota", "Delete a quota without sub-quotas or jobs; its nodes go back to the parent")
    def delete(self, request, quota_id):
        quota = get_visible_quota(request.user, quota_id)
        _require_admin(request.user, quota)
        delete_quota(quota)
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
        quotas = quotas.filter(workspaces__pk__in=[w for w in workspaces if w.isdigit()]).distinct()
    if (statuses := params.listed(q, "Statuses")) and "Ready" not in statuses:
        quotas = quotas.none()
    return list(quotas)


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


def _require_admin(user, quota: Quota) -> None:
    if not can_administer(user, quota):
        raise forbidden(
            f"Changing quota {quota.quota_id} needs a staff user or an owner/admin of a workspace bound to it."
        )


# --- CreateQuota / UpdateQuota / DeleteQuota ----------------------------------------------------

@transaction.atomic
def create_quota(user, body: dict) -> Quota:
    parent = _parent_of(user, body)
    name = _quota_name(body.get("QuotaName"))
    rtype = _resource_type(body.get("ResourceType"), parent)
    quota = Quota.objects.create(
        quota_id=f"quota{secrets.token_hex(6)}",
        name=name,
        description=_description(body.get("Description")),
        tenant=parent.tenant if parent else _tenant_of(user),
        resource_type=rtype,
        parent=parent,
        queue_strategy=_queue_strategy(body.get("QueueStrategy"), QueueStrategy.BEST_EFFORT),
        allow_priority_preemption=_self_preemption(body.get("QuotaConfig"), False),
    )
    _assign_nodes(quota, parent, rtype, body.get("Min"))
    return quota


def _parent_of(user, body: dict) -> Quota | None:
    parent_id = body.get("ParentQuotaId")
    if not params.given(parent_id):
        if not user.is_staff:
            raise forbidden("Creating a root quota needs a staff user; give ParentQuotaId to create a sub-quota.")
        return None
    parent = visible_quotas(user).filter(quota_id=str(parent_id)).first()
    if parent is None:
        raise invalid("ParentQuotaId", f"no quota {parent_id!r}")
    _require_admin(user, parent)
    return parent


def _quota_name(value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise invalid("QuotaName", "is required (1 to 64 characters)")
    value = value.strip()
    if len(value) > 64:
        raise invalid("QuotaName", f"must be at most 64 characters, got {len(value)}")
    if Quota.objects.filter(name=value).exists():
        raise invalid("QuotaName", f"a quota named {value!r} already exists")
    return value


def _description(value) -> str:
    if not params.given(value):
        return ""
    if not isinstance(value, str) or len(value) > 256:
        raise invalid("Description", "must be a string of at most 256 characters")
    return value


def _resource_type(value, parent: Quota | None) -> str:
    if not params.given(value):
        return parent.resource_type if parent else ResourceType.ECS
    if value not in ResourceType.values:
        raise invalid("ResourceType", f"must be one of {', '.join(ResourceType.values)}, got {value!r}")
    if parent and value != parent.resource_type:
        raise invalid("ResourceType", f"must match the parent quota's {parent.resource_type}, got {value!r}")
    return value


def _queue_strategy(value, default: str) -> str:
    if not params.given(value):
        return default
    if value not in QueueStrategy.values:
        raise invalid("QueueStrategy", f"must be one of {', '.join(QueueStrategy.values)}, got {value!r}")
    return value


def _self_preemption(config, default: bool) -> bool:
    if not params.given(config):
        return default
    if not isinstance(config, dict):
        raise invalid("QuotaConfig", "must be an object")
    value = config.get("EnableSelfQuotaPreemption")
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid("QuotaConfig.EnableSelfQuotaPreemption", f"must be true or false, got {value!r}")
    return value


def _tenant_of(user):
    membership = Membership.objects.filter(user=user).select_related("workspace__tenant").order_by(
        "-is_default", "pk").first()
    if membership is None:
        from quotas.models import Tenant

        tenant = Tenant.objects.order_by("pk").first()
        if tenant is None:
            raise ApiError("InvalidParameter", "There is no tenant to create the quota in.")
        return tenant
    return membership.workspace.tenant


def _assign_nodes(quota: Quota, parent: Quota | None, rtype: str, min_spec) -> None:
    """Move Min.NodeSpecs' nodes from the parent's own nodes (or the public pool) to the quota."""
    wanted = _node_specs(min_spec, rtype)
    source = f"parent quota {parent.name}" if parent else "public pool"
    errors = {}
    for index, (spec, count) in enumerate(wanted):
        # Locked in pk order, so two CreateQuota calls cannot take the same free node.
        free = list(
            Node.objects.select_for_update().filter(quota=parent, spec=spec, status=NodeStatus.READY)
            .exclude(pk__in=Pod.objects.holding().values("node")).order_by("pk")[:count]
        )
        if len(free) < count:
            errors[f"Min.NodeSpecs[{index}].Count"] = (
                f"only {len(free)} free {spec.instance_type} node(s) in the {source}, asked for {count}"
            )
            continue
        Node.objects.filter(pk__in=[n.pk for n in free]).update(quota=quota)
    if errors:
        raise invalid_fields(errors)


def _node_specs(min_spec, rtype: str) -> list[tuple[ResourceSpec, int]]:
    if not params.given(min_spec):
        return []
    if not isinstance(min_spec, dict):
        raise invalid("Min", "must be an object with NodeSpecs: [{Type, Count}]")
    node_specs = min_spec.get("NodeSpecs") or []
    if not isinstance(node_specs, list):
        raise invalid("Min.NodeSpecs", "must be a list of {Type, Count}")
    specs = {s.instance_type: s for s in ResourceSpec.objects.all()}
    out, errors, seen = [], {}, set()
    for i, item in enumerate(node_specs):
        field = f"Min.NodeSpecs[{i}]"
        item = item if isinstance(item, dict) else {}
        spec = specs.get(item.get("Type"))
        count = item.get("Count")
        if spec is None:
            errors[f"{field}.Type"] = f"unknown instance type {item.get('Type')!r}; known: {', '.join(sorted(specs))}"
        elif spec.resource_type != rtype:
            errors[f"{field}.Type"] = f"{spec.instance_type} is {spec.resource_type}, the quota is {rtype}"
        elif spec.instance_type in seen:
            errors[f"{field}.Type"] = f"{spec.instance_type} is listed twice"
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            errors[f"{field}.Count"] = f"must be a whole number of nodes, at least 1, got {count!r}"
        if spec is not None and f"{field}.Type" not in errors and f"{field}.Count" not in errors:
            seen.add(spec.instance_type)
            out.append((spec, count))
    if errors:
        raise invalid_fields(errors)
    return out


@transaction.atomic
def update_quota(quota: Quota, body: dict) -> None:
    if params.given(body.get("QuotaName")) and body["QuotaName"] != quota.name:
        quota.name = _quota_name(body["QuotaName"])
    if "Description" in body and body["Description"] is not None:
        quota.description = _description(body["Description"])
    quota.queue_strategy = _queue_strategy(body.get("QueueStrategy"), quota.queue_strategy)
    quota.allow_priority_preemption = _self_preemption(body.get("QuotaConfig"), quota.allow_priority_preemption)
    quota.save()


@transaction.atomic
def delete_quota(quota: Quota) -> None:
    children = list(quota.children.values_list("quota_id", flat=True))
    if children:
        raise ApiError("QuotaInUse", f"Quota {quota.quota_id} still has sub-quotas {', '.join(children)}; delete them first.")
    live = quota.jobs.exclude(status__in=FINAL).count()
    if live:
        raise ApiError("QuotaInUse", f"Quota {quota.quota_id} has {live} job(s) not finished; stop them first.")
    if quota.jobs.exists():
        raise ApiError("QuotaInUse", f"Quota {quota.quota_id} has finished jobs that refer to it; it is kept for their history.")
    # Its nodes go back where they came from: the parent, or the public pool.
    Node.objects.filter(quota=quota).update(quota=quota.parent)
    quota.delete()


# --- ListNodes ----------------------------------------------------------------------------------

NODE_SORT = {"NodeName": "name", "GmtCreateTime": "created_at", "GmtCreatedTime": "created_at",
             "NodeType": "spec__instance_type", "NodeStatus": "status"}


class NodesView(SdkView):
    """GET /api/v1/nodes (ListNodes)."""

    @sdk_action("ListNodes", "Nodes with what runs on them", query=(
        *PAGING, "QuotaId", "FilterByQuotaId", "NodeNames", "NodeStatuses", "NodeTypes", "GPUType",
        "AcceleratorType", "WorkspaceId"))
    def get(self, request):
        q = request.query_params
        nodes = _filtered_nodes(request.user, q)
        field = NODE_SORT[params.choice(q, "SortBy", NODE_SORT, default="NodeName")]
        nodes = nodes.order_by(("-" if params.order(q, default="asc") == "desc" else "") + field, "pk")
        rows, total = paginate(nodes, page_of(q))
        pods = _pods_by_node(rows)
        return self.reply(request, {"Nodes": [_node(n, pods.get(n.pk, [])) for n in rows], "TotalCount": total})


def _filtered_nodes(user, q):
    nodes = Node.objects.select_related("spec", "quota")
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
    if gpu_type := params.text(q, "GPUType"):
        nodes = nodes.filter(spec__gpu_type__icontains=gpu_type)
    if accelerator := params.choice(q, "AcceleratorType", ("CPU", "GPU"), case_insensitive=True):
        nodes = nodes.filter(spec__gpu__gt=0) if accelerator == "GPU" else nodes.filter(spec__gpu=0)
    if workspace := params.text(q, "WorkspaceId"):
        bound = Quota.objects.filter(workspaces__pk=workspace if workspace.isdigit() else 0)
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


def _node(node: Node, pods: list[Pod]) -> dict:
    spec = node.spec
    users = {pod.job.user_id: pod.job.user.username for pod in pods}
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
        jobs = jobs.filter(user__pk__in=[u for u in users if u.isdigit()])
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
