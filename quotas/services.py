"""Quotas as users change them: create, update, scale (nodes in and out) and delete, and who may
see and change which; nodes as admins cordon, uncordon and drain them; and resource groups. The console's pages and the API's actions both call these functions with plain
values; every refusal is one of the exceptions below, which each face turns into its own shape.

Tenants are walls. A user sees the quotas of the tenants of their workspaces, and changes a quota as
an owner/admin of a workspace of its tenant bound to it or to one of its ancestors. Staff users run
the cluster: they see and change every tenant's quotas, and create root quotas in the tenant of their
default workspace; a quota's parent, nodes and workspaces always come from its own tenant (nodes
also from the public pool, which no tenant owns).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, F, Max, Min, Q

from jobs import nodes as node_life
from jobs.cycle_lock import hold_cycle_lock
from jobs.models import Job, Pod
from jobs.services import visible_to
from jobs.states import FINAL
from quotas.models import (
    Membership, Node, NodeStatus, QueueStrategy, Quota, ResourceSpec, ResourceType, Role, Workspace,
)
from quotas.tree import subtrees

ADMIN_ROLES = (Role.OWNER, Role.ADMIN)
NAME_MAX, DESCRIPTION_MAX = 64, 256


class QuotaNotFound(Exception):
    """No quota of that id that the user may see: the same answer whether it exists elsewhere or not."""

    def __init__(self, quota_id: str):
        super().__init__(f"Quota {quota_id!r} does not exist.")
        self.quota_id = quota_id


class QuotaForbidden(PermissionDenied):
    """The user may see the quota but not change it, or may not create a root quota."""


class QuotaRefused(Exception):
    """A change was refused; `errors` maps each field (name, parent, nodes, node_specs[0].count, ...)
    to what is wrong and what is allowed."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class QuotaInUse(Exception):
    """The quota still has sub-quotas or jobs, so it may not be deleted."""


# --- who may see and change what ---------------------------------------------------------------

def visible_quotas(user):
    """The quotas of the tenants of the user's workspaces; staff see every tenant's."""
    quotas = Quota.objects.select_related("parent")
    if user.is_staff:
        return quotas
    return quotas.filter(tenant__in=Workspace.objects.filter(memberships__user=user).values("tenant"))


def visible_nodes(user):
    """The nodes of the quotas the user may see, and the public pool, which serves every workspace;
    nothing for a user in no workspace."""
    if not user.is_staff and not Membership.objects.filter(user=user).exists():
        return Node.objects.none()
    return Node.objects.filter(Q(quota__isnull=True) | Q(quota__in=visible_quotas(user).values("pk")))


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
        user=user, role__in=ADMIN_ROLES, workspace__tenant=quota.tenant_id, workspace__quotas__in=lineage(quota)
    ).exists()


def administered_quotas(user):
    """The quotas the user may change: those bound to a workspace they own or administer, and the
    sub-quotas below them (all of them for staff)."""
    if user.is_staff:
        return visible_quotas(user)
    bound = Quota.objects.filter(
        workspaces__memberships__user=user, workspaces__memberships__role__in=ADMIN_ROLES,
        workspaces__tenant=F("tenant"),
    ).values_list("pk", flat=True)
    tree = subtrees()
    return visible_quotas(user).filter(pk__in={pk for top in bound for pk in tree[top]})


def quota_for_user(user, quota_id: str, *, admin: bool = False) -> Quota:
    """The quota if the user may see it (and, with `admin`, change it)."""
    quota = visible_quotas(user).filter(quota_id=quota_id).first()
    if quota is None:
        raise QuotaNotFound(quota_id)
    if admin and not can_administer(user, quota):
        raise QuotaForbidden(
            f"Changing quota {quota.quota_id} needs a staff user or an owner/admin of a workspace bound to it."
        )
    return quota


@dataclass(frozen=True)
class UsageScope:
    """The workspaces whose usage a user may read, and which of their jobs make it up: `who`, a
    condition on the fields workspace, user and accessibility, which jobs and the rows summed from
    them (GPU-day rollups, daily bills) all carry."""

    workspaces: Any  # a Workspace queryset
    who: Q

    @property
    def jobs(self):
        return Job.objects.filter(self.who)


def usage_scope(user, workspace: Workspace | None) -> UsageScope:
    """Whose usage the user reads from `workspace` (the console's current one): staff and the owners and
    admins of any workspace of its tenant, every workspace of that tenant with all their jobs; anyone
    else, their own workspaces of that tenant and the jobs visible_jobs shows them. Never another
    tenant's, whatever the role."""
    is_member = workspace is not None and Membership.objects.filter(user=user, workspace=workspace).exists()
    if not (is_member or (workspace is not None and user.is_staff)):
        return UsageScope(Workspace.objects.none(), Q(pk__in=[]))
    tenant_workspaces = Workspace.objects.filter(tenant=workspace.tenant_id)
    # The workspaces as constants, as visible_to gives them: the planner then knows their sizes.
    if user.is_staff or Membership.objects.filter(user=user, role__in=ADMIN_ROLES,
                                                  workspace__tenant=workspace.tenant_id).exists():
        return UsageScope(tenant_workspaces, Q(workspace__in=sorted(tenant_workspaces.values_list("pk", flat=True))))
    own = tenant_workspaces.filter(memberships__user=user)
    return UsageScope(own, visible_to(user) & Q(workspace__in=sorted(own.values_list("pk", flat=True))))


def new_quota_id() -> str:
    # Random, not sequential: an id says nothing about how many quotas other tenants have.
    return f"quota{secrets.token_hex(6)}"


# --- create, update, delete ----------------------------------------------------------------------

@dataclass(frozen=True)
class QuotaRequest:
    """A new quota. Its nodes are either `node_ids` (the console's choice of nodes of the pool) or
    `node_counts` ((instance type, count) pairs: so many free nodes of each type, the API's Min)."""

    name: Any
    parent_id: str | None = None  # None: a root quota, which needs staff
    description: Any = ""
    resource_type: Any = None  # None: the parent's, or ECS for a root quota
    queue_strategy: Any = QueueStrategy.BEST_EFFORT
    allow_priority_preemption: bool = False
    min_runtime_before_preemption_s: int = 0
    backfill: Any = False
    weight: Any = Decimal(1)
    workspace_ids: tuple[int, ...] = ()
    node_ids: tuple[int, ...] = ()
    node_counts: tuple[tuple[Any, Any], ...] = ()
    labels: Any = ()  # PAI's Labels: [{Key, Value}]


@transaction.atomic
def create_quota(user, request: QuotaRequest) -> Quota:
    parent = _parent(user, request.parent_id, None) if request.parent_id is not None else _root(user)
    quota = Quota(quota_id=new_quota_id(), parent=parent, tenant=parent.tenant if parent else _home_tenant(user),
                  resource_type=parent.resource_type if parent else ResourceType.ECS)
    fields = {k: getattr(request, k) for k in ("name", "description", "queue_strategy", "allow_priority_preemption",
                                                "min_runtime_before_preemption_s", "backfill", "weight", "labels")}
    if request.resource_type is not None:
        fields["resource_type"] = request.resource_type
    _apply(quota, fields)
    quota.save()
    _bind_workspaces(quota, request.workspace_ids)
    if request.node_counts:
        _take_free_nodes(quota, request.node_counts)
    else:
        _set_nodes(quota, set(request.node_ids))
    return quota


UPDATABLE = {"name", "description", "parent_id", "resource_type", "queue_strategy", "allow_priority_preemption",
             "min_runtime_before_preemption_s", "backfill", "weight", "workspace_ids", "node_ids", "labels"}


@transaction.atomic
def update_quota(user, quota_id: str, **changes) -> Quota:
    """Change the given fields of the quota; `node_ids` scales it to exactly those nodes."""
    unknown = set(changes) - UPDATABLE
    if unknown:
        raise TypeError(f"update_quota() cannot change {', '.join(sorted(unknown))}")
    quota = quota_for_user(user, quota_id, admin=True)
    if "parent_id" in changes and changes["parent_id"] != (quota.parent.quota_id if quota.parent_id else None):
        quota.parent = _parent(user, changes["parent_id"], quota) if changes["parent_id"] else _root(user)
    _apply(quota, {k: v for k, v in changes.items() if k not in ("parent_id", "workspace_ids", "node_ids")})
    quota.save()
    if "workspace_ids" in changes:
        _bind_workspaces(quota, changes["workspace_ids"])
    if "node_ids" in changes:
        _set_nodes(quota, set(changes["node_ids"]))
    return quota


@transaction.atomic
def delete_quota(user, quota_id: str) -> None:
    """Delete a quota without sub-quotas or jobs; its nodes go back to the parent (or the public pool)."""
    quota = quota_for_user(user, quota_id, admin=True)
    children = list(quota.children.values_list("quota_id", flat=True))
    if children:
        raise QuotaInUse(f"Quota {quota.quota_id} still has sub-quotas {', '.join(children)}; delete them first.")
    live = quota.jobs.exclude(status__in=FINAL).count()
    if live:
        raise QuotaInUse(f"Quota {quota.quota_id} has {live} job(s) not finished; stop them first.")
    if quota.jobs.exists():
        raise QuotaInUse(f"Quota {quota.quota_id} has finished jobs that refer to it; it is kept for their history.")
    nodes = [n.pk for n in _locked(Node.objects.filter(quota=quota))]
    Node.objects.filter(pk__in=nodes).update(quota=quota.parent)
    quota.delete()


def _root(user) -> None:
    """No parent: a root quota, which only staff may make."""
    if not user.is_staff:
        raise QuotaForbidden("Creating a root quota needs a staff user; give a parent quota to create a sub-quota.")


def _home_tenant(user):
    """The tenant a staff user's root quota belongs to: that of their default workspace."""
    membership = (Membership.objects.filter(user=user).select_related("workspace__tenant")
                  .order_by("-is_default", "pk").first())
    if membership is None:
        raise QuotaRefused({"parent": "a root quota belongs to the tenant of your default workspace, and you "
                                      "have none: join a workspace of that tenant first"})
    return membership.workspace.tenant


def _parent(user, parent_id, quota: Quota | None) -> Quota:
    """The parent the user asked for: one they may see and change, of the quota's own tenant, and
    (when moving a quota) not the quota itself or one of its sub-quotas."""
    parent = visible_quotas(user).filter(quota_id=str(parent_id)).first()
    if parent is None:
        raise QuotaRefused({"parent": f"no quota {parent_id!r}"})
    if quota is not None and parent.tenant_id != quota.tenant_id:
        raise QuotaRefused({"parent": f"must be a quota of the tenant {quota.tenant.name}, as {quota.name} is"})
    if quota is not None and parent.pk in subtrees()[quota.pk]:
        raise QuotaRefused({"parent": f"cannot be {quota.name} itself or one of its sub-quotas"})
    if not can_administer(user, parent):
        raise QuotaForbidden(
            f"Adding a sub-quota to {parent.quota_id} needs a staff user or an owner/admin of a workspace bound to it."
        )
    return parent


def _apply(quota: Quota, fields: dict) -> None:
    """Set the fields on the quota, or refuse them all naming each bad one."""
    errors = {}
    for name, value in fields.items():
        problem = CHECKS[name](quota, value)
        if problem:
            errors[name] = problem
        else:
            setattr(quota, name, CLEAN.get(name, lambda v: v)(value))
    if quota.parent_id and quota.resource_type != quota.parent.resource_type and "resource_type" not in errors:
        errors["resource_type"] = (f"must match the parent quota's {quota.parent.resource_type}, "
                                   f"got {quota.resource_type!r}")
    if errors:
        raise QuotaRefused(errors)


def _check_name(quota: Quota, value) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"is required (1 to {NAME_MAX} characters)"
    if len(value.strip()) > NAME_MAX:
        return f"must be at most {NAME_MAX} characters, got {len(value.strip())}"
    if Quota.objects.filter(name=value.strip()).exclude(pk=quota.pk).exists():
        return f"a quota named {value.strip()!r} already exists"
    return None


def _check_resource_type(quota: Quota, value) -> str | None:
    if value not in ResourceType.values:
        return f"must be one of {', '.join(ResourceType.values)}, got {value!r}"
    if value != quota.resource_type and quota.pk and quota.children.exists():
        return f"cannot change while {quota.name} has sub-quotas of type {quota.resource_type}"
    return None


LABELS_MAX, LABEL_KEY_MAX, LABEL_VALUE_MAX = 20, 128, 256


def _check_labels(quota: Quota, value) -> str | None:
    if not isinstance(value, (list, tuple)) or not all(isinstance(label, dict) for label in value):
        return "must be a list of {Key, Value}"
    if len(value) > LABELS_MAX:
        return f"has {len(value)} labels; at most {LABELS_MAX}"
    keys = [label.get("Key") for label in value]
    for i, label in enumerate(value):
        key, text = label.get("Key"), label.get("Value", "")
        if not isinstance(key, str) or not key.strip() or len(key) > LABEL_KEY_MAX:
            return f"[{i}].Key must be 1 to {LABEL_KEY_MAX} characters, got {key!r}"
        if key in keys[:i]:
            return f"[{i}].Key {key!r} is given more than once; each key once"
        if not isinstance(text, str) or len(text) > LABEL_VALUE_MAX:
            return f"[{i}].Value must be text of at most {LABEL_VALUE_MAX} characters, got {text!r}"
        if set(label) - {"Key", "Value"}:
            return f"[{i}] has keys {sorted(set(label) - {'Key', 'Value'})}; a label is {{Key, Value}}"
    return None


def _labels(value) -> list[dict]:
    return [{"Key": label["Key"].strip(), "Value": label.get("Value") or ""} for label in value]


def has_labels(quota: Quota, wanted: list[tuple[str, str | None]]) -> bool:
    """Whether the quota carries every (key, value) label; a value of None asks only for the key."""
    labels = {label["Key"]: label["Value"] for label in quota.labels or []}
    return all(key in labels and value in (None, labels[key]) for key, value in wanted)


def _check_choice(allowed):
    def check(quota: Quota, value) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}, got {value!r}"
    return check


CHECKS = {
    "name": _check_name,
    "description": lambda quota, value: None if isinstance(value, str) and len(value) <= DESCRIPTION_MAX
    else f"must be a string of at most {DESCRIPTION_MAX} characters",
    "resource_type": _check_resource_type,
    "queue_strategy": _check_choice(QueueStrategy.values),
    "labels": _check_labels,
    "allow_priority_preemption": lambda quota, value: None if isinstance(value, bool)
    else f"must be true or false, got {value!r}",
    "min_runtime_before_preemption_s": lambda quota, value: None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0
    else f"must be a whole number of seconds, at least 0, got {value!r}",
    "backfill": lambda quota, value: None if isinstance(value, bool) else f"must be true or false, got {value!r}",
    "weight": lambda quota, value: None if _weight(value) is not None
    else f"must be a number from {WEIGHT_MIN} to {WEIGHT_MAX} with at most 2 decimal places, got {value!r}",
}
CLEAN = {"name": lambda v: v.strip(), "labels": lambda v: _labels(v), "weight": lambda v: _weight(v)}
WEIGHT_MIN, WEIGHT_MAX = Decimal("0.01"), Decimal("9999.99")


def _weight(value) -> Decimal | None:
    """A quota's fair-share weight as a Decimal, or None when it is not one we accept."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        return None
    try:  # a float by its shortest repr: JSON's 1.5 is "1.5"
        weight = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    if not weight.is_finite() or not WEIGHT_MIN <= weight <= WEIGHT_MAX or weight != weight.quantize(Decimal("0.01")):
        return None
    return weight


def _bind_workspaces(quota: Quota, workspace_ids) -> None:
    ids = {int(w) for w in workspace_ids}
    workspaces = list(Workspace.objects.filter(pk__in=ids, tenant=quota.tenant_id))
    foreign = sorted(ids - {w.pk for w in workspaces})
    if foreign:
        raise QuotaRefused({"workspaces": f"{', '.join(map(str, foreign))} are not workspaces of the tenant "
                                          f"{quota.tenant.name}; a quota serves only its own tenant's workspaces"})
    quota.workspaces.set(workspaces)


# --- scale: which nodes a quota holds -------------------------------------------------------------

def _locked(nodes, limit: int | None = None) -> list[Node]:
    # No schedule cycle may bind a pod to a node between the check that no pod holds it and its move.
    hold_cycle_lock()
    # Nodes are locked in pk order by every writer, so two changes that touch the same nodes wait
    # for each other instead of deadlocking, and neither takes a node the other just took.
    nodes = nodes.select_related("spec").order_by("pk").select_for_update(of=("self",))
    return list(nodes[:limit] if limit is not None else nodes)


def free_nodes(nodes):
    """Those of the nodes that can join a quota: Ready, and no pod holds capacity on them."""
    return nodes.filter(status=NodeStatus.READY).exclude(pods__in=Pod.objects.holding())


def pool_of(parent: Quota | None):
    """The nodes a quota takes from and gives back to: its parent's own nodes, or the public pool."""
    return Node.objects.filter(quota=parent) if parent else Node.objects.filter(quota__isnull=True)


def _source(parent: Quota | None) -> str:
    return f"parent quota {parent.name}" if parent else "public pool"


def _holders(nodes: list[Node]) -> dict[int, str]:
    """Node pk -> a pod holding capacity on it."""
    return dict(Pod.objects.holding().filter(node__in=[n.pk for n in nodes]).values_list("node_id", "pod_id"))


def _set_nodes(quota: Quota, wanted: set[int]) -> None:
    """The quota holds exactly the `wanted` nodes: new ones come from its pool and must be free; the
    ones it lets go return to the pool and must not be running a pod."""
    locked = _locked(Node.objects.filter(Q(quota=quota) | Q(pk__in=wanted)))
    # Read where each node is only once it is locked: another change may just have moved it.
    nodes = [n for n in locked if n.quota_id in (quota.pk, quota.parent_id)]
    holders = _holders(nodes)
    problems = []
    if missing := wanted - {n.pk for n in nodes}:
        problems.append(f"node(s) {', '.join(map(str, sorted(missing)))} are not in the {_source(quota.parent)}.")
    for node in nodes:
        problems += _node_problems(node, quota, node.pk in wanted, holders.get(node.pk))
    if problems:
        raise QuotaRefused({"nodes": " ".join(problems)})
    Node.objects.filter(pk__in=[n.pk for n in nodes if n.pk not in wanted]).update(quota=quota.parent)
    Node.objects.filter(pk__in=[n.pk for n in nodes if n.pk in wanted and n.quota_id != quota.pk]).update(quota=quota)


def _node_problems(node: Node, quota: Quota, wanted: bool, pod: str | None) -> list[str]:
    mine = node.quota_id == quota.pk
    if not wanted:
        return [f"{node.name} runs pod {pod}; it cannot leave {quota.name} until the pod ends."] if pod else []
    problems = []
    if node.spec.resource_type != quota.resource_type:
        problems.append(f"{node.name} is a {node.spec.get_resource_type_display()} node; "
                        f"this quota is {quota.resource_type}.")
    if not mine and node.status != NodeStatus.READY:
        problems.append(f"{node.name} is {node.status}; only Ready nodes can join a quota.")
    if not mine and pod:
        problems.append(f"{node.name} runs pod {pod}; only free nodes can join a quota.")
    return problems


def _take_free_nodes(quota: Quota, counts) -> None:
    """Move so many free nodes of each instance type from the quota's pool to it."""
    wanted = _node_counts(counts, quota.resource_type)
    errors = {}
    for index, (spec, count) in enumerate(wanted):
        free = _locked(free_nodes(pool_of(quota.parent).filter(spec=spec)), limit=count)
        if len(free) < count:
            errors[f"node_specs[{index}].count"] = (
                f"only {len(free)} free {spec.instance_type} node(s) in the {_source(quota.parent)}, asked for {count}"
            )
            continue
        Node.objects.filter(pk__in=[n.pk for n in free]).update(quota=quota)
    if errors:
        raise QuotaRefused(errors)


def _node_counts(counts, rtype: str, least: int = 1) -> list[tuple[ResourceSpec, int]]:
    specs = {s.instance_type: s for s in ResourceSpec.objects.all()}
    out, errors, seen = [], {}, set()
    for i, (instance_type, count) in enumerate(counts):
        spec = specs.get(instance_type)
        type_key, count_key = f"node_specs[{i}].type", f"node_specs[{i}].count"
        if spec is None:
            errors[type_key] = f"unknown instance type {instance_type!r}; known: {', '.join(sorted(specs))}"
        elif spec.resource_type != rtype:
            errors[type_key] = f"{spec.instance_type} is {spec.resource_type}, the quota is {rtype}"
        elif spec.instance_type in seen:
            errors[type_key] = f"{spec.instance_type} is listed twice"
        if isinstance(count, bool) or not isinstance(count, int) or count < least:
            errors[count_key] = f"must be a whole number of nodes, at least {least}, got {count!r}"
        if spec is not None and type_key not in errors and count_key not in errors:
            seen.add(spec.instance_type)
            out.append((spec, count))
    if errors:
        raise QuotaRefused(errors)
    return out


@transaction.atomic
def scale_quota(user, quota_id: str, counts) -> Quota:
    """Scale the quota to `counts` ((instance type, count) pairs: its Min, its sub-quotas' nodes
    included, as GetQuota shows it); types not listed keep their nodes. More nodes come free from
    its pool; fewer return free ones first, and a node still holding a pod never leaves."""
    quota = quota_for_user(user, quota_id, admin=True)
    own = {n.pk: n for n in Node.objects.filter(quota=quota)}
    busy = _holders(list(own.values()))
    tree = subtrees()[quota.pk]
    wanted, errors = set(own), {}
    for index, (spec, count) in enumerate(_node_counts(counts, quota.resource_type, least=0)):
        mine = sorted((n for n in own.values() if n.spec_id == spec.pk), key=lambda n: (n.pk in busy, n.pk))
        change = count - Node.objects.filter(quota__in=tree, spec=spec).count()
        if change > 0:
            free = list(free_nodes(pool_of(quota.parent).filter(spec=spec)).order_by("pk")
                        .values_list("pk", flat=True)[:change])
            if len(free) < change:
                errors[f"node_specs[{index}].count"] = (f"{change} more {spec.instance_type} node(s) needed, only "
                                                        f"{len(free)} free in the {_source(quota.parent)}")
            wanted |= set(free)
        elif change < 0 and len(mine) < -change:
            errors[f"node_specs[{index}].count"] = (
                f"sub-quotas of {quota.name} hold {count - change - len(mine)} {spec.instance_type} node(s); "
                f"scale them down first, or ask for at least that many")
        elif change < 0:
            wanted -= {n.pk for n in mine[:-change]}
    if errors:
        raise QuotaRefused(errors)
    # _set_nodes checks again under the nodes' locks: a node that began holding a pod stays.
    _set_nodes(quota, wanted)
    return quota


def assignable_nodes(quota: Quota | None, parent: Quota | None):
    """The nodes a quota may hold: its own, and the free nodes of the pool it takes from."""
    free = free_nodes(pool_of(parent)).values("pk")
    mine = Q(quota=quota) if quota is not None else Q(pk__in=[])
    return Node.objects.filter(Q(pk__in=free) | mine)


def parent_choices(user, quota: Quota | None):
    """The quotas the user may put a quota under: ones they may change, of the quota's own tenant,
    and not the quota itself or one of its sub-quotas; and the parent it has now."""
    parents = administered_quotas(user)
    if quota is None:
        return parents
    movable = parents.filter(tenant=quota.tenant_id).exclude(pk__in=subtrees()[quota.pk])
    return visible_quotas(user).filter(Q(pk__in=movable.values("pk")) | Q(pk=quota.parent_id))


def workspace_choices(user, quota: Quota | None):
    """The workspaces a quota may serve: its tenant's (for a new quota, those of the user's tenants)."""
    if quota is not None:
        return Workspace.objects.filter(tenant=quota.tenant_id)
    if user.is_staff:
        return Workspace.objects.all()
    return Workspace.objects.filter(tenant__in=Workspace.objects.filter(memberships__user=user).values("tenant"))


# --- nodes: cordon, uncordon, drain ---------------------------------------------------------------

class NodeNotFound(Exception):
    """No node of that name that the user may see: the same answer whether it exists elsewhere or not."""

    def __init__(self, name: str):
        super().__init__(f"Node {name!r} does not exist.")
        self.name = name


NODE_OPERATIONS = ("Cordon", "Uncordon", "Drain")


def node_for_user(user, name: str, *, admin: bool = False) -> Node:
    """The node if the user may see it (and, with `admin`, operate it: an admin of its quota's tree,
    or staff for the public pool, which no tenant owns)."""
    node = visible_nodes(user).select_related("quota", "spec").filter(name=name).first()
    if node is None:
        raise NodeNotFound(name)
    if admin and not (can_administer(user, node.quota) if node.quota_id else user.is_staff):
        who = f" or an owner/admin of a workspace bound to quota {node.quota.quota_id}" if node.quota_id else ""
        raise QuotaForbidden(f"Operating node {node.name} needs a staff user{who}.")
    return node


@transaction.atomic
def operate_node(user, name: str, operation: str) -> Node:
    """Cordon (no new pods; its pods keep running), Uncordon, or Drain (cordon, and stop its pods
    with their grace period; jobs with fault tolerance are requeued elsewhere)."""
    if operation not in NODE_OPERATIONS:
        raise QuotaRefused({"operation": f"must be one of {', '.join(NODE_OPERATIONS)}, got {operation!r}"})
    node = node_for_user(user, name, admin=True)
    # Under the cycle's lock: no cycle binds a pod to the node between the cordon and the drain.
    node = _locked(Node.objects.filter(pk=node.pk))[0]
    Node.objects.filter(pk=node.pk).update(cordoned=operation != "Uncordon")
    if operation == "Drain":
        node_life.drain(node, f"Node {node.name} drained by {user}")
    node.refresh_from_db()
    return node


# --- resource groups ------------------------------------------------------------------------------
# PAI's resource group is the machines bought into a resource pool, from which root quotas are
# carved. Here machines join by registering with their instance type into the public pool, from
# which root quotas take their nodes: so a resource group is the nodes of one instance type.

RESOURCE_GROUP_PREFIX = "rg-"


class ResourceGroupNotFound(Exception):
    """No resource group of that id with a node the user may see."""

    def __init__(self, group_id: str):
        super().__init__(f"Resource group {group_id!r} does not exist.")
        self.group_id = group_id


@dataclass(frozen=True)
class ResourceGroup:
    group_id: str
    spec: ResourceSpec
    node_count: int
    public_count: int  # of those, in the public pool
    created_at: Any  # when its first node joined
    modified_at: Any  # when its last node joined


def visible_resource_groups(user) -> list[ResourceGroup]:
    """The instance types of the nodes the user may see, with only those nodes counted."""
    rows = (visible_nodes(user).values("spec").order_by("spec__instance_type")
            .annotate(n=Count("pk"), public=Count("pk", filter=Q(quota__isnull=True)),
                      first=Min("created_at"), last=Max("created_at")))
    specs = ResourceSpec.objects.in_bulk([r["spec"] for r in rows])
    return [ResourceGroup(RESOURCE_GROUP_PREFIX + specs[r["spec"]].instance_type, specs[r["spec"]], r["n"],
                          r["public"], r["first"], r["last"]) for r in rows]


def resource_group_for_user(user, group_id: str) -> ResourceGroup:
    found = [g for g in visible_resource_groups(user) if g.group_id == group_id]
    if not found:
        raise ResourceGroupNotFound(group_id)
    return found[0]
