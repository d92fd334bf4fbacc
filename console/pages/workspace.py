"""The workspace switcher: the session remembers the chosen workspace."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from console.pages.base import SESSION_KEY, user_workspaces


@login_required
@require_POST
def switch(request):
    try:
        chosen = user_workspaces(request.user).filter(pk=int(request.POST.get("workspace", ""))).first()
    except ValueError:
        chosen = None
    if chosen is not None:
        request.session[SESSION_KEY] = chosen.pk
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/"
    # A job page of the old workspace makes no sense in the new one: go to its jobs list.
    return redirect("console:jobs" if target.startswith("/jobs/") else target)
