"""Quotas: the tree with usage bars for every user who may see them, create/edit with nodes and
workspaces for admins; Nodes."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, IntegerField, OuterRef, Prefetch, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from console.forms import QuotaForm
from console.pages.base import page, require_quota_admin
from console.pages.usage import quota_usage
from jobs.models import Pod
from quotas.models import Quota
from quotas.services import (
    NodeNotFound, QuotaForbidden, QuotaNotFound, QuotaRefused, QuotaRequest, administered_quotas,
    create_quota, operate_node, quota_for_user, update_quota, visible_nodes, visible_quotas,
)


@login_required
def quota_list(request):
    # Read-only for members: the quotas ListQuotas shows them, with the same figures.
    quotas = list(visible_quotas(request.user).prefetch_related("workspaces").order_by("name"))
    usage = quota_usage(quotas)
    editable = set(administered_quotas(request.user).values_list("pk", flat=True))
    return page(request, "console/quotas/list.html", {"tree": tree(quotas, usage), "editable": editable},
                nav="quotas")


def tree(quotas, usage) -> list[dict]:
    """Depth-first rows (quota, depth, usage) so the template draws the tree with indentation."""
    children = {}
    for q in quotas:
        children.setdefault(q.parent_id, []).append(q)
    rows = []

    def walk(parent_id, depth):
        for q in children.get(parent_id, []):
            rows.append({"quota": q, "depth": depth, "usage": usage[q.pk]})
            walk(q.pk, depth + 1)

    walk(None, 0)
    return rows


@login_required
def quota_edit(request, quota_id=None):
    require_quota_admin(request.user)
    quota = _quota_to_change(request.user, quota_id) if quota_id else None
    form = QuotaForm(request.POST or None, instance=quota, user=request.user)
    if request.method == "POST" and form.is_valid() and (saved := save_quota(form, request.user, quota)):
        messages.success(request, f"Quota {saved.name} saved.")
        return redirect("console:quotas")
    return page(request, "console/quotas/edit.html", {"form": form, "quota": quota}, nav="quotas")


def _quota_to_change(user, quota_id: str) -> Quota:
    """A quota of another tenant is a 404, as one that does not exist; one the user may only read, a 403."""
    try:
        return quota_for_user(user, quota_id, admin=True)
    except QuotaNotFound as exc:
        raise Http404(str(exc)) from None


def save_quota(form, user, quota: Quota | None) -> Quota | None:
    """Create or change the quota through quotas.services; its refusals go next to their fields."""
    data = form.cleaned_data
    values = {
        "name": data["name"], "description": data["description"],
        "parent_id": data["parent"].quota_id if data["parent"] else None,
        "resource_type": data["resource_type"], "queue_strategy": data["queue_strategy"],
        "allow_priority_preemption": data["allow_priority_preemption"],
        "min_runtime_before_preemption_s": data["min_runtime_before_preemption_s"],
        "backfill": data["backfill"],
        "workspace_ids": tuple(w.pk for w in data["workspaces"]), "node_ids": tuple(n.pk for n in data["nodes"]),
    }
    if data["weight"] is not None:  # left out: the quota keeps its weight (1 for a new one)
        values["weight"] = data["weight"]
    try:
        return update_quota(user, quota.quota_id, **values) if quota else create_quota(user, QuotaRequest(**values))
    except QuotaRefused as refused:
        for field, message in refused.errors.items():
            form.add_error(field if field in form.fields else None, message)
        return None


@login_required
def node_list(request):
    holding = Pod.objects.holding().filter(node=OuterRef("pk")).order_by().values("node")
    nodes = (
        visible_nodes(request.user).select_related("spec", "quota")
        .annotate(gpus_used=Coalesce(Subquery(holding.annotate(total=Sum("gpu")).values("total"),
                                              output_field=IntegerField()), Value(0)),
                  pod_count=Coalesce(Subquery(holding.annotate(n=Count("pk")).values("n"),
                                              output_field=IntegerField()), Value(0)))
        .order_by("quota__name", "spec__instance_type", "name")
    )
    if request.user.is_staff:
        pods = Pod.objects.holding().select_related("job").order_by("pod_id")
        nodes = nodes.prefetch_related(Prefetch("pods", queryset=pods, to_attr="holding"))
    # The nodes the user may cordon, uncordon and drain: his quotas' trees', and the public pool for staff.
    operable = set(administered_quotas(request.user).values_list("pk", flat=True))
    return page(request, "console/nodes/list.html", {
        "nodes": nodes, "show_pods": request.user.is_staff, "operable": operable,
    }, nav="nodes")


@login_required
@require_POST
def node_operate(request, name: str):
    """Cordon, Uncordon or Drain a node through quotas.services, as OperateNode does."""
    operation = request.POST.get("operation", "")
    try:
        node = operate_node(request.user, name, operation)
    except NodeNotFound as exc:
        raise Http404(str(exc)) from None
    except (QuotaForbidden, QuotaRefused) as exc:
        messages.error(request, str(exc))
    else:
        state = "cordoned: it takes no new pods" if node.cordoned else "schedulable again"
        messages.success(request, f"{operation}: node {node.name} is {state}.")
    return redirect("console:nodes")
