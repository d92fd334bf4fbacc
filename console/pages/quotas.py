"""Quotas (admins): the tree with usage bars, create/edit with nodes and workspaces; Nodes."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.db.models import Count, IntegerField, OuterRef, Prefetch, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404, redirect

from console.forms import QuotaForm
from console.pages.base import page, require_quota_admin
from console.pages.usage import quota_usage
from jobs.models import Pod
from quotas.models import Node, Quota


@login_required
def quota_list(request):
    require_quota_admin(request.user)
    quotas = list(Quota.objects.select_related("parent").prefetch_related("workspaces").order_by("name"))
    usage = quota_usage(quotas)
    return page(request, "console/quotas/list.html", {"tree": tree(quotas, usage)}, nav="quotas")


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
    quota = get_object_or_404(Quota, quota_id=quota_id) if quota_id else None
    form = QuotaForm(request.POST or None, instance=quota)
    if request.method == "POST" and form.is_valid():
        saved = save_quota(form, request.user)
        messages.success(request, f"Quota {saved.name} saved.")
        return redirect("console:quotas")
    return page(request, "console/quotas/edit.html", {"form": form, "quota": quota}, nav="quotas")


@transaction.atomic
def save_quota(form, user) -> Quota:
    quota = form.save(commit=False)
    if not quota.pk:
        quota.tenant = _tenant_for(user, form.cleaned_data.get("parent"))
        quota.quota_id = next_quota_id()
    quota.save()
    form.save_m2m()
    chosen = set(n.pk for n in form.cleaned_data["nodes"])
    pool = form.cleaned_data.get("parent")
    # Nodes taken away go back where they came from: the parent quota or the public pool.
    Node.objects.filter(quota=quota).exclude(pk__in=chosen).update(quota=pool)
    Node.objects.filter(pk__in=chosen).update(quota=quota)
    return quota


def _tenant_for(user, parent):
    from quotas.models import Tenant

    if parent:
        return parent.tenant
    workspace = user.workspaces.select_related("tenant").first()
    return workspace.tenant if workspace else Tenant.objects.order_by("pk").first()


def next_quota_id() -> str:
    last = Quota.objects.filter(quota_id__startswith="quota").order_by("-quota_id").values_list("quota_id", flat=True).first()
    number = int(last[5:]) + 1 if last and last[5:].isdigit() else 1
    return f"quota{number:08d}"


@login_required
def node_list(request):
    holding = Pod.objects.holding().filter(node=OuterRef("pk")).order_by().values("node")
    nodes = (
        Node.objects.select_related("spec", "quota")
        .annotate(gpus_used=Coalesce(Subquery(holding.annotate(total=Sum("gpu")).values("total"),
                                              output_field=IntegerField()), Value(0)),
                  pod_count=Coalesce(Subquery(holding.annotate(n=Count("pk")).values("n"),
                                              output_field=IntegerField()), Value(0)))
        .order_by("quota__name", "spec__instance_type", "name")
    )
    if request.user.is_staff:
        pods = Pod.objects.holding().select_related("job").order_by("pod_id")
        nodes = nodes.prefetch_related(Prefetch("pods", queryset=pods, to_attr="holding"))
    return page(request, "console/nodes/list.html", {"nodes": nodes, "show_pods": request.user.is_staff}, nav="nodes")
