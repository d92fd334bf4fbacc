"""What every console page needs: the current workspace, the navigation, and the access rules.

The current workspace lives in the session; it is always one of the user's memberships. Job pages look jobs up through `job_queryset(user)`, a queryset filtered by
membership, so a job the user may not see is a 404 — its existence is not leaked.
"""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from jobs.services import visible_jobs
from quotas.models import Membership, Role, Workspace

SESSION_KEY = "workspace_id"

NAV = [
    ("jobs", "Jobs", "console:jobs"),
    ("create", "Create Job", "console:job-create"),
    ("quotas", "Quotas", "console:quotas"),
    ("nodes", "Nodes", "console:nodes"),
    ("market", "Spot Market", "console:market"),
    ("usage", "Usage", "console:usage"),
    ("billing", "Billing", "console:billing"),
    ("keys", "Access Keys", "console:access-keys"),
    ("notifications", "Notifications", "console:notifications"),
]


def user_workspaces(user):
    return Workspace.objects.filter(memberships__user=user).order_by("name")


def current_workspace(request) -> Workspace | None:
    """The session's workspace if the user still may use it, else the default membership's."""
    workspaces = list(user_workspaces(request.user))
    by_id = {w.pk: w for w in workspaces}
    chosen = by_id.get(request.session.get(SESSION_KEY))
    if chosen is None:
        default = (
            Membership.objects.filter(user=request.user, is_default=True).values_list("workspace_id", flat=True).first()
        )
        chosen = by_id.get(default) or (workspaces[0] if workspaces else None)
    return chosen


def is_quota_admin(user) -> bool:
    """Staff, or an owner/admin of some workspace."""
    return user.is_staff or Membership.objects.filter(user=user, role__in=[Role.OWNER, Role.ADMIN]).exists()


def require_quota_admin(user) -> None:
    if not is_quota_admin(user):
        raise PermissionDenied("Quota administration needs staff or workspace admin rights.")


def job_queryset(user):
    """Jobs the user may see: those of the workspaces they are a member of (jobs.services' rule)."""
    return visible_jobs(user)


def page(request, template: str, context: dict, *, nav: str, partial: str | None = None, status: int = 200):
    """Render the whole page, or only `partial` of it when HTMX asked for it."""
    if partial and request.htmx:
        return render(request, f"{template}#{partial}", context, status=status)
    workspace = context.get("workspace") or current_workspace(request)
    context = {
        "nav": NAV, "active": nav, "workspace": workspace,
        "workspaces": user_workspaces(request.user), "quota_admin": is_quota_admin(request.user),
        **context,
    }
    return render(request, template, context, status=status)


__all__ = ["login_required", "page", "current_workspace", "job_queryset", "require_quota_admin"]
