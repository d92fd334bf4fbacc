"""Notifications as users manage them (subscriptions, a test event, the delivery log) and as the
platform queues them (`on_transitions`; notify/delivery.py sends them). The console calls these functions;
every refusal is NotifyRefused (a field -> what is wrong) or PermissionDenied.

Who may do what: any member of a workspace sees its subscriptions and deliveries; its owners and
admins (jobs.services.ADMIN_ROLES, PAI's rule for changing a workspace's jobs) create and delete
them; only staff may let a webhook reach private addresses (notify/addresses.py).
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.core.validators import EmailValidator, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apikit import crypto
from jobs.history import Transition
from jobs.services import ADMIN_ROLES, visible_jobs
from notify import addresses, events, signing, tasks
from notify.models import TEST_EVENT, Channel, Delivery, Event, Subscription
from quotas.models import Membership, Workspace


class NotifyRefused(Exception):
    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


# ---- who may ---------------------------------------------------------------------------------


def role_in(user, workspace: Workspace) -> str | None:
    return Membership.objects.filter(workspace=workspace, user=user).values_list("role", flat=True).first()


def can_manage(user, workspace: Workspace) -> bool:
    return role_in(user, workspace) in ADMIN_ROLES


def _require_manage(user, workspace: Workspace) -> None:
    if not can_manage(user, workspace):
        raise PermissionDenied(f"Only the owners and admins of workspace {workspace.name} manage its notifications.")


def _require_member(user, workspace: Workspace) -> None:
    if role_in(user, workspace) is None:
        raise PermissionDenied(f"You are not a member of workspace {workspace.name}.")


# ---- subscriptions ---------------------------------------------------------------------------


def subscriptions(user, workspace: Workspace):
    _require_member(user, workspace)
    return Subscription.objects.filter(workspace=workspace)


def deliveries(user, workspace: Workspace, limit: int = 50) -> list[Delivery]:
    """The newest deliveries of the workspace; a member who does not manage it sees those about the
    jobs they may see (visible_jobs: not others' PRIVATE jobs) and the test events."""
    _require_member(user, workspace)
    found = Delivery.objects.filter(subscription__workspace=workspace).select_related("subscription")
    if not can_manage(user, workspace):
        found = found.filter(Q(job_id="") | Q(job_id__in=visible_jobs(user).values("job_id")))
    return list(found[:limit])


def create_subscription(user, workspace: Workspace, *, channel: str, target: str, chosen: list[str],
                        allow_private: bool = False) -> tuple[Subscription, str]:
    """A new subscription and its signing secret (webhooks; "" for e-mail), returned once: it is
    stored encrypted and never shown again."""
    _require_manage(user, workspace)
    if allow_private and not user.is_staff:
        raise PermissionDenied("Only staff may let a webhook reach loopback, link-local or this server's addresses.")
    errors = {}
    if channel not in Channel.values:
        errors["channel"] = f"must be one of {', '.join(Channel.values)}, got {channel!r}"
    unknown = sorted(set(chosen) - set(Event.values))
    if unknown or not chosen:
        errors["events"] = f"choose one or more of {', '.join(Event.values)}" + (f"; unknown: {', '.join(unknown)}"
                                                                                 if unknown else "")
    target = target.strip()
    if channel == Channel.WEBHOOK:
        error = _url_error(target, allow_private)
        if error:
            errors["url"] = error
    elif channel == Channel.EMAIL and not _is_email(target):
        errors["email"] = "must be an e-mail address, e.g. ops@example.com"
    if errors:
        raise NotifyRefused(errors)
    secret = signing.new_secret() if channel == Channel.WEBHOOK else ""
    subscription = Subscription.objects.create(
        workspace=workspace, channel=channel, url=target if channel == Channel.WEBHOOK else "",
        email=target if channel == Channel.EMAIL else "", events=[e for e in Event.values if e in chosen],
        secret_encrypted=crypto.encrypt(secret) if secret else "", allow_private=allow_private, created_by=user)
    return subscription, secret


def _url_error(url: str, allow_private: bool) -> str | None:
    if len(url) > 2048:
        return "must be at most 2048 characters"
    try:
        addresses.checked_addresses(url, allow_private=allow_private)
    except addresses.Refused as e:
        return str(e)
    return None


def _is_email(text: str) -> bool:
    try:
        EmailValidator()(text)
    except ValidationError:
        return False
    return True


def delete_subscription(user, workspace: Workspace, pk: int) -> bool:
    """False when the workspace has no such subscription (another workspace's is not there either)."""
    _require_manage(user, workspace)
    return Subscription.objects.filter(workspace=workspace, pk=pk).delete()[0] > 0


def send_test(user, workspace: Workspace, pk: int) -> Delivery | None:
    """A Test event to one subscription, delivered like any other; None if it is not there."""
    _require_manage(user, workspace)
    subscription = Subscription.objects.filter(workspace=workspace, pk=pk).first()
    if subscription is None:
        return None
    uid = events.new_uid()
    body = events.test_event_body(uid, workspace=(workspace.pk, workspace.name), now=timezone.now())
    delivery = Delivery.objects.create(uid=uid, subscription=subscription, event=TEST_EVENT, body=body)
    _enqueue_on_commit([delivery.pk])
    return delivery


# ---- queueing: the hook of every status change ----------------------------------------------


def on_transitions(sender, *, transitions: list[Transition], **_kwargs) -> None:
    """jobs.history.transitions_recorded: a Delivery for each subscription that chose an event of
    these status changes, written in their transaction and sent after it commits.

    Cheap for the scheduler: steps that are no event (Queuing, EnvPreparing, Stopping, ...) cost
    nothing, and the rest one query, on the subscriptions' workspace index, joined to these jobs
    (rather than reading the jobs' workspace, which a batch may not have loaded)."""
    wanted = {}
    for t in transitions:
        found = events.events_of(t.status, t.reason)
        if found:
            wanted.setdefault(t.job.pk, []).append((t, found))
    if not wanted:
        return
    rows = Subscription.objects.filter(workspace__jobs__in=list(wanted)).order_by().values_list(
        "pk", "events", "workspace_id", "workspace__name", "workspace__jobs", "workspace__jobs__job_id",
        "workspace__jobs__display_name")
    now, new = timezone.now(), []
    for pk, chosen, ws_pk, ws_name, job_pk, job_id, display_name in rows:
        for t, found in wanted[job_pk]:
            event = events.named(found, chosen)
            if event:
                uid = events.new_uid()
                body = events.job_body(uid, event, found, t, workspace=(ws_pk, ws_name), job=(job_id, display_name),
                                       now=now)
                new.append(Delivery(uid=uid, subscription_id=pk, event=event, job_id=job_id, body=body, created_at=now))
    if new:
        _enqueue_on_commit([d.pk for d in Delivery.objects.bulk_create(new)])


def _enqueue_on_commit(pks: list[int]) -> None:
    transaction.on_commit(lambda: [tasks.deliver.delay(pk) for pk in pks])
