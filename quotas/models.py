"""Tenants, workspaces, instance types, nodes and quotas: who owns which capacity."""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from apikit import crypto


class ResourceType(models.TextChoices):
    ECS = "ECS", "General Computing"
    LINGJUN = "Lingjun", "Lingjun AI Computing Service"


class Tenant(models.Model):
    name = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Workspace(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="workspaces")
    name = models.CharField(max_length=64, unique=True)
    description = models.CharField(max_length=256, blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="workspaces")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    # The workspace a CreateJob without WorkspaceId lands in.
    is_default = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="one_membership_per_user")]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.workspace}"


class ResourceSpec(models.Model):
    """An instance type (EcsSpec): what one node of this type offers and what it costs on demand."""

    instance_type = models.CharField(max_length=64, unique=True)
    resource_type = models.CharField(max_length=16, choices=ResourceType.choices, default=ResourceType.ECS)
    cpu = models.PositiveIntegerField(help_text="vCPU cores")
    memory_mib = models.PositiveIntegerField()
    gpu = models.PositiveIntegerField(default=0)
    gpu_type = models.CharField(max_length=64, blank=True)
    on_demand_price_per_minute = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(Decimal("0"))]
    )

    class Meta:
        ordering = ["instance_type"]

    def __str__(self) -> str:
        return self.instance_type

    @property
    def cpu_m(self) -> int:
        return self.cpu * 1000

    @property
    def memory_gib(self) -> int:
        return self.memory_mib // 1024

    @property
    def shape(self) -> str:
        """What one node of this type offers, as the pages say it: "8 × NVIDIA V100 · 64 vCPUs · 256 GiB"."""
        gpus = f"{self.gpu} × {self.gpu_type or 'GPU'}" if self.gpu else "no GPU"
        return f"{gpus} · {self.cpu} vCPUs · {self.memory_mib / 1024:g} GiB"


class QueueStrategy(models.TextChoices):
    STRICT_FIFO = "StrictFIFO", "Strict FIFO (blocks behind the head)"
    BEST_EFFORT = "BestEffort", "Best effort (backfills smaller jobs)"


class Quota(models.Model):
    """Guaranteed capacity of a team: the nodes assigned to it and to its sub-quotas.

    A sub-quota takes its nodes from its parent; nodes of no quota form the public pool of their
    instance type (pay-as-you-go and spot).
    """

    quota_id = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=64, unique=True)
    description = models.CharField(max_length=256, blank=True)
    labels = models.JSONField(default=list, blank=True, help_text="PAI's Labels: [{Key, Value}]")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quotas")
    resource_type = models.CharField(max_length=16, choices=ResourceType.choices, default=ResourceType.ECS)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    workspaces = models.ManyToManyField(Workspace, blank=True, related_name="quotas")
    queue_strategy = models.CharField(
        max_length=16, choices=QueueStrategy.choices, default=QueueStrategy.BEST_EFFORT
    )
    # Preemption settings.
    allow_priority_preemption = models.BooleanField(
        default=False, help_text="A higher-priority job of this quota may preempt lower-priority ones."
    )
    min_runtime_before_preemption_s = models.PositiveIntegerField(
        default=0, help_text="An idle pod borrowing this quota's nodes runs at least this long."
    )
    # Scheduling settings (scheduler/reservation.py, scheduler/fair_share.py).
    # Off by default: on traces whose jobs give no maximum running time it made queueing worse
    # (docs/design.md, rule 6), so a quota turns it on where its jobs' ends can be told.
    backfill = models.BooleanField(
        default=False, help_text="The first job of the queue that does not fit reserves the nodes where it "
        "fits earliest; the jobs behind it start only if they do not delay it."
    )
    weight = models.DecimalField(
        max_digits=6, decimal_places=2, default=Decimal(1), validators=[MinValueValidator(Decimal("0.01"))],
        help_text="Its share of idle capacity when several quotas borrow, relative to the others' weights.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class NodeStatus(models.TextChoices):
    READY = "Ready"
    NOT_READY = "NotReady"
    CORDONED = "Cordoned"


class Executor(models.TextChoices):
    """How a node's agent runs pods: the first three are real agents (agent/), one queue per node."""

    PODMAN = "podman", "Podman containers"
    DOCKER = "docker", "Docker containers"
    PROCESS = "process", "Processes on the host (image not used)"
    SIMULATED = "simulated", "Simulated (KWOK-like)"


class Node(models.Model):
    name = models.CharField(max_length=128, unique=True)
    spec = models.ForeignKey(ResourceSpec, on_delete=models.PROTECT, related_name="nodes")
    quota = models.ForeignKey(
        Quota, null=True, blank=True, on_delete=models.SET_NULL, related_name="nodes",
        help_text="Empty: the public pool of this instance type.",
    )
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.READY)
    # Apart from status, which heartbeats own: an admin's cordon outlives the node's comings and goings.
    cordoned = models.BooleanField(default=False, help_text="Takes no new pods; its pods keep running.")
    executor = models.CharField(max_length=16, choices=Executor.choices, default=Executor.SIMULATED)
    hostname = models.CharField(max_length=256, blank=True)
    gpu_uuids = models.JSONField(default=list, blank=True, help_text="GPUs discovered through NVML.")
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def queue(self) -> str:
        """The Celery queue this node's agent consumes."""
        return self.queue_of(self.name)

    @staticmethod
    def queue_of(name: str) -> str:
        return f"agent.{name}"

    @property
    def pool_label(self) -> str:
        return self.quota.name if self.quota_id else f"public pool ({self.spec.instance_type})"


class AgentCredential(models.Model):
    """The join token an admin issued for a node's agent (or "simulated", the simulated agent's):
    only a heartbeat signed with it registers the node, into the quota the admin chose."""

    name = models.CharField(max_length=128, unique=True, help_text="The node's name, or \"simulated\".")
    quota = models.ForeignKey(
        Quota, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The quota the node joins at its first heartbeat; empty: the public pool.",
    )
    token_encrypted = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def token(self) -> str:
        return crypto.decrypt(self.token_encrypted)
