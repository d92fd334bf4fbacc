"""Access Keys: a user's AccessKey pairs for the SDKs; the secret is shown once, at creation."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from apikit.models import AccessKey, AccessKeyStatus
from console.pages.base import page


@login_required
def key_list(request):
    keys = AccessKey.objects.filter(user=request.user).order_by("-created_at")
    return page(request, "console/keys/list.html", {"keys": keys}, nav="keys")


@login_required
@require_POST
def key_create(request):
    key, secret = AccessKey.issue(request.user)
    # Rendered, not redirected: the secret exists only in this response.
    response = page(request, "console/keys/created.html", {"key": key, "secret": secret}, nav="keys")
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def key_disable(request, key_id):
    key = get_object_or_404(AccessKey, user=request.user, access_key_id=key_id)
    key.status = AccessKeyStatus.ACTIVE if key.status == AccessKeyStatus.DISABLED else AccessKeyStatus.DISABLED
    key.save(update_fields=["status"])
    messages.success(request, f"AccessKey {key.access_key_id} is now {key.status}.")
    return redirect("console:access-keys")


@login_required
@require_POST
def key_delete(request, key_id):
    key = get_object_or_404(AccessKey, user=request.user, access_key_id=key_id)
    key.delete()
    messages.success(request, f"AccessKey {key_id} deleted.")
    return redirect("console:access-keys")
