"""Notifications: a workspace's webhook and e-mail subscriptions to job events, a test event, and
the delivery log. Members read; owners and admins change (notify.services decides)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from console.pages.base import current_workspace, page
from notify import services
from notify.models import Channel, DeliveryStatus, Event

WATCHED = (DeliveryStatus.PENDING, DeliveryStatus.RETRYING)


class SubscriptionForm(forms.Form):
    channel = forms.ChoiceField(choices=Channel.choices, initial=Channel.WEBHOOK, widget=forms.RadioSelect)
    url = forms.CharField(label="Webhook URL", required=False, max_length=2048,
                          widget=forms.URLInput(attrs={"placeholder": "https://hooks.example.com/opendlc"}))
    email = forms.CharField(label="E-mail address", required=False, max_length=254,
                            widget=forms.EmailInput(attrs={"placeholder": "ops@example.com"}))
    events = forms.MultipleChoiceField(choices=Event.choices, widget=forms.CheckboxSelectMultiple,
                                       initial=[Event.SUCCEEDED, Event.FAILED])
    allow_private = forms.BooleanField(label="Allow loopback, link-local and this server's addresses", required=False,
                                       help_text="Staff only: for a receiver on this host or its network's edge.")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        if not user.is_staff:
            del self.fields["allow_private"]


def _workspace(request):
    workspace = current_workspace(request)
    if workspace is None:
        raise PermissionDenied("You are not a member of any workspace.")
    return workspace


@login_required
def notifications(request):
    workspace = _workspace(request)
    form = SubscriptionForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        target = data["url"] if data["channel"] == Channel.WEBHOOK else data["email"]
        try:
            subscription, secret = services.create_subscription(
                request.user, workspace, channel=data["channel"], target=target, chosen=data["events"],
                allow_private=data.get("allow_private", False))
        except services.NotifyRefused as refused:
            for name, error in refused.errors.items():
                form.add_error(name if name in form.fields else None, error)
        else:
            # Rendered, not redirected: the secret exists only in this response.
            response = page(request, "console/notifications/created.html",
                            {"subscription": subscription, "secret": secret}, nav="notifications")
            response["Cache-Control"] = "no-store"
            return response
    deliveries = services.deliveries(request.user, workspace)
    context = {"subscriptions": services.subscriptions(request.user, workspace), "deliveries": deliveries,
               "manage": services.can_manage(request.user, workspace), "form": form,
               "live": any(d.status in WATCHED for d in deliveries)}
    return page(request, "console/notifications/list.html", context, nav="notifications", partial="log",
                status=400 if form.errors else 200)


def _pk(text: str) -> int:
    if not text.isdigit():
        raise Http404("No such subscription in this workspace.")
    return int(text)


@login_required
@require_POST
def notification_delete(request, pk):
    if not services.delete_subscription(request.user, _workspace(request), _pk(pk)):
        raise Http404("No such subscription in this workspace.")
    messages.success(request, "Subscription deleted; its delivery log went with it.")
    return redirect("console:notifications")


@login_required
@require_POST
def notification_test(request, pk):
    delivery = services.send_test(request.user, _workspace(request), _pk(pk))
    if delivery is None:
        raise Http404("No such subscription in this workspace.")
    messages.success(request, f"Test event queued ({delivery.uid}); its outcome shows in the delivery log.")
    return redirect("console:notifications")
