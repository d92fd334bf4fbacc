"""Access Keys: a user's AccessKey pairs for the SDKs; the secret is shown once, at creation."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from apikit.models import AccessKey, AccessKeyStatus
from console.pages.base import current_workspace, page


@login_required
def key_list(request):
    keys = AccessKey.objects.filter(user=request.user).order_by("-created_at")
    return page(request, "console/keys/list.html", {"keys": keys}, nav="keys")


# The session names the key whose secret the next GET of the created page shows; only the id is kept,
# the secret stays encrypted on the key.
NEW_KEY = "access_key_to_show"


@login_required
@require_POST
def key_create(request):
    key, _ = AccessKey.issue(request.user)
    request.session[NEW_KEY] = key.access_key_id
    # Post/redirect/get: reloading the page that shows the secret must not create another key.
    return redirect("console:access-key-created")


@login_required
def key_created(request):
    """The secret of the key just created, once: a reload finds it gone and says so."""
    key_id = request.session.pop(NEW_KEY, None)
    key = AccessKey.objects.filter(user=request.user, access_key_id=key_id).first() if key_id else None
    if key is None:
        messages.info(request, "An AccessKey's secret is shown only once, right after it is created: "
                               "create another key if you did not copy it.")
        return redirect("console:access-keys")
    response = page(request, "console/keys/created.html",
                    {"key": key, "secret": key.secret, "workspace": current_workspace(request)}, nav="keys")
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
