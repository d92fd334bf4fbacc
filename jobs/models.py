"""Jobs as a DLC CreateJob request describes them, their roles, pods, events and history."""

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from jobs.states import LIVE_STATUSES, WAITING, JobStatus, PodStatus, PodSubStatus
from market.bids import bid_price
from quotas.models import Quota, ResourceSpec, ResourceType, Workspace


class JobType(models.TextChoices):
    PYTORCH = "PyTorchJob"
    TENSORFLOW = "TFJob"
    MPI = "MPIJob"
    XGBOOST = "XGBoostJob"
    RAY = "RayJob"
    SLURM = "SlurmJob"


class Source(models.TextChoices):
    QUOTA = "quota", "Resource Quota"
    SPOT = "spot", "Preemptible Resources"
    PUBLIC = "public", "Public Resources"


class OversoldType(models.TextChoices):
    FORBIDDEN = "ForbiddenQuotaOverSold", "Not accepted"
    ACCEPT = "AcceptQuotaOverSold", "Acceptable"
    FORCE = "ForceQuotaOverSold", "Only Idle Resources"


class Accessibility(models.TextChoices):
    """Who sees a job: PUBLIC the whole workspace, PRIVATE its owner and the workspace's owners and admins."""

    PUBLIC = "PUBLIC"
    PRIVATE = "PRIVATE"


class RunType(models.TextChoices):
    SYNCHRONOUS = "Synchronous"
    ASYNCHRONOUS = "Asynchronous"


class FaultTolerancePolicy(models.TextChoices):
    EXIT_CODE_AND_ERROR_MSG = "ExitCodeAndErrorMsg"
    ON_FAILURE = "OnFailure"


# Indexes. Every insert, and every update that changes an indexed column (a status change: most
# job and pod updates), writes an entry into each index of the table. So a table keeps no index
# that another one already covers: a foreign key whose column leads a composite index or
# constraint has db_index=False, and the unique ids are constraints, not unique=True, which on
# PostgreSQL also builds a second (varchar_pattern_ops) index for LIKE that nothing uses.


# Row locks. Every writer that locks jobs and pods (a schedule cycle, a batch of pod reports, a
# stop, a restart) locks the job rows first and then their pods, each in pk order: two writers
# that take their locks in one order cannot deadlock. These two are the only ways to lock them.
class JobQuerySet(models.QuerySet):
    def locked(self):
        """These jobs, each row locked (FOR UPDATE), in lock order."""
        return self.select_for_update().order_by("pk")


class Job(models.Model):
    job_id = models.CharField(max_length=64)  # unique: Meta.constraints
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="jobs", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    display_name = models.CharField(max_length=256)
    job_type = models.CharField(max_length=32, choices=JobType.choices, default=JobType.PYTORCH)
    user_command = models.TextField()
    envs = models.JSONField(default=dict, blank=True)
    # PAI's CustomEnvs, [{Key, Value, Visible}]: in the pods' environment beside envs; a value with
    # Visible false is never shown back (api.job_shapes, the console).
    custom_envs = models.JSONField(default=list, blank=True)
    description = models.TextField(blank=True)
    accessibility = models.CharField(max_length=16, choices=Accessibility.choices, default=Accessibility.PUBLIC)
    tags = models.JSONField(default=dict, blank=True, help_text="The user's tags (Settings.Tags): key -> value")
    # PAI's ElasticSpec as given, echoed by GetJob. With EnableElasticTraining its one role runs
    # MinParallelism to MaxParallelism workers (elastic_range; jobs/elastic.py).
    elastic_spec = models.JSONField(default=dict, blank=True)
    client_token = models.CharField(max_length=64, blank=True, default="",
                                    help_text="The idempotency key CreateJob was sent with (x-acs-client-token)")
    priority = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(9)]
    )
    resource_type = models.CharField(max_length=16, choices=ResourceType.choices, default=ResourceType.ECS)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.QUOTA)
    quota = models.ForeignKey(Quota, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    oversold_type = models.CharField(max_length=32, choices=OversoldType.choices, default=OversoldType.FORBIDDEN)
    # Set at admission: True when the pods run on idle resources ("Not in Quota").
    use_oversold_resource = models.BooleanField(null=True, blank=True)
    user_vpc = models.JSONField(default=dict, blank=True, help_text="VpcId, SwitchId, SecurityGroupId")
    max_running_time_minutes = models.PositiveIntegerField(null=True, blank=True)
    termination_grace_s = models.PositiveIntegerField(default=30)
    # What the pods mount, resolved at submission (datasets.services.resolve_job_sources): a job
    # runs with the datasets and code it was submitted with, even if they are deleted later.
    data_sources = models.JSONField(default=list, blank=True, help_text="[{data_source_id, uri, mount_path}]")
    code_source = models.JSONField(null=True, blank=True,
                                   help_text="{code_source_id, repo, branch, commit, mount_path}")

    # Fault tolerance (AIMaster).
    ft_enabled = models.BooleanField("Automatic Fault Tolerance", default=False)
    ft_run_type = models.CharField(max_length=16, choices=RunType.choices, default=RunType.SYNCHRONOUS)
    ft_max_restarts = models.PositiveIntegerField("Maximum Job Restarts", default=3)
    ft_hang_detection = models.BooleanField("Hang Detection", default=False)
    ft_hang_interval_s = models.PositiveIntegerField(default=1800)
    ft_policy = models.CharField(
        max_length=32, choices=FaultTolerancePolicy.choices, default=FaultTolerancePolicy.EXIT_CODE_AND_ERROR_MSG
    )
    ft_other_config = models.CharField(max_length=1024, blank=True)
    ft_max_preemption_restarts = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: unlimited")

    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.CREATING)
    sub_status = models.CharField(max_length=32, blank=True)
    reason_code = models.CharField(max_length=64, blank=True)
    reason_message = models.TextField(blank=True)
    restart_count = models.PositiveIntegerField(default=0)
    preemption_restart_count = models.PositiveIntegerField(default=0)
    # The scheduler's explanation while the job waits, and its place in its queue.
    wait_reason = models.TextField(blank=True)
    # The reason's code (scheduler.decisions), a bounded set: /metrics counts waiting jobs by it.
    wait_reason_code = models.CharField(max_length=32, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    last_checkpoint_step = models.BigIntegerField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    last_progress_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(default=timezone.now)
    submitted_at = models.DateTimeField(null=True, blank=True)
    running_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    modified_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["job_id"], name="unique_job_id"),
            # A client's retry of CreateJob finds the job its token made (jobs.services.create_job).
            models.UniqueConstraint(fields=["user", "workspace", "client_token"], condition=~models.Q(client_token=""),
                                    name="unique_client_token"),
        ]
        indexes = [
            # Also the scope's side of the Usage page's joins (pods and bills to their jobs): what
            # usage_scope and visible_jobs test and what the sums group by are in it, so PostgreSQL
            # reads it instead of every job row.
            models.Index(fields=["workspace", "-created_at"], include=["id", "quota", "user", "accessibility"],
                         name="job_workspace_covering"),
            models.Index(fields=["status"]),
            models.Index(fields=["workspace", "status"]),  # a workspace's waiting jobs, counted per submission
            # ListJobs' default window (created in the last 7 days) counts its TotalCount from this
            # index alone on PostgreSQL: the columns visible_jobs and the common filters test are in it.
            models.Index(fields=["created_at"], include=["workspace", "user", "accessibility", "status"],
                         name="job_created_covering"),
            # The Usage page's queueing times: the jobs whose first Running falls in the range.
            models.Index(fields=["running_at"], include=["workspace", "quota", "submitted_at", "created_at", "user",
                                                         "accessibility"],
                         name="job_running_covering"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} ({self.display_name})"

    @property
    def idle_label(self) -> str:
        # A re-queued job keeps its last admission's flag, but runs on no resources while it waits.
        if self.use_oversold_resource is None or self.status in WAITING:
            return ""
        return "Not in Quota" if self.use_oversold_resource else "In Quota"

    @property
    def wait_explanation(self) -> str:
        """Why a waiting job waits, as the console's job page and GetJob / ListJobs say it: the
        scheduler's reason and the job's place in its queue. Empty once the job no longer waits."""
        if self.status not in WAITING or not (self.wait_reason or self.queue_position):
            return ""
        reason = self.wait_reason or "Waiting for the next schedule cycle."
        return f"{reason} (queue position {self.queue_position})" if self.queue_position else reason

    @property
    def shown_custom_envs(self) -> list[dict]:
        """CustomEnvs as every page and answer may show them: a value that is not Visible is left out."""
        return [{"Key": e["Key"], "Visible": e["Visible"], **({"Value": e["Value"]} if e["Visible"] else {})}
                for e in self.custom_envs or []]

    @property
    def elastic_range(self) -> tuple[int, int] | None:
        return elastic_range(self.elastic_spec)

    @property
    def resizes_in_place(self) -> bool:
        """Whether its workers re-form their group when resized, instead of restarting (ElasticSpec
        ResizeInPlace, OpenDLC's own key; jobs/elastic.py)."""
        return self.elastic_range is not None and self.elastic_spec.get("ResizeInPlace") is True

    @property
    def payment_type(self) -> str:
        """The billing tag `acs:pai:dlc:payType`: spot, postpaid (public pool) or prepaid (quota)."""
        return {Source.SPOT: "spot", Source.PUBLIC: "postpaid"}.get(self.source, "prepaid")


def elastic_range(spec) -> tuple[int, int] | None:
    """(MinParallelism, MaxParallelism) of an elastic job's ElasticSpec (validated at create),
    None for a job that is not elastic."""
    if not isinstance(spec, dict) or not spec.get("EnableElasticTraining"):
        return None
    return int(spec["MinParallelism"]), int(spec["MaxParallelism"])


class JobSpec(models.Model):
    """One role of a job (Worker, Master, PS, ...): how many pods, on which instance type, and the bid.

    A role of a Resource Quota job may give its pods' resources instead of an instance type (PAI's
    ResourceConfig: GPUs, vCPUs, memory per pod). Such pods take part of a node: the scheduler packs
    them onto any node of the quota's scope with room (best fit)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="specs", db_index=False)
    role = models.CharField(max_length=32, default="Worker")
    pod_count = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    spec = models.ForeignKey(ResourceSpec, on_delete=models.PROTECT, related_name="+", null=True, blank=True,
                             help_text="Empty: the pods' resources are the role's own (cpu, memory_mib, gpu).")
    cpu = models.PositiveIntegerField(null=True, blank=True, help_text="vCPU cores per pod, without an instance type")
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    gpu = models.PositiveIntegerField(null=True, blank=True)
    image = models.CharField(max_length=512)
    # PAI's ImageConfig {DockerRegistry, Username, Password | Auth}: the agent pulls the image with
    # it; GetJob shows the registry and user, never the password.
    image_config = models.JSONField(default=dict, blank=True)
    command = models.TextField(blank=True, help_text="Empty: the job's command.")
    spot_strategy = models.CharField(max_length=32, blank=True)
    spot_discount_limit = models.DecimalField(max_digits=3, decimal_places=2, null=True, blank=True)
    spot_price_limit = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    spot_duration_hours = models.PositiveSmallIntegerField(default=1, help_text="Protection period: 0 or 1 hour")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "role"], name="one_spec_per_role"),
            models.CheckConstraint(name="instance_type_or_resources", condition=(
                Q(spec__isnull=False, cpu__isnull=True, memory_mib__isnull=True, gpu__isnull=True)
                | Q(spec__isnull=True, cpu__isnull=False, memory_mib__isnull=False, gpu__isnull=False))),
        ]

    def __str__(self) -> str:
        return f"{self.role} × {self.pod_count} {self.shape}"

    @property
    def shape(self) -> "PodResources":
        """What each pod of the role takes: its instance type's resources, or the role's own."""
        if self.spec_id is not None:
            return PodResources(self.spec.gpu, self.spec.cpu, self.spec.memory_mib, self.spec.instance_type)
        return PodResources(self.gpu, self.cpu, self.memory_mib)

    @property
    def bid_price(self) -> Decimal | None:
        """The most this role pays per node-minute, or None when it does not bid."""
        if self.spec_id is None:  # custom resources: only on a quota, which takes no bids
            return None
        return self.bid(self.spot_price_limit, self.spot_discount_limit, self.spec.on_demand_price_per_minute)

    @staticmethod
    def bid(price_limit: Decimal | None, discount_limit: Decimal | None, on_demand: Decimal) -> Decimal | None:
        """bid_price from the columns (for readers that fetch values, not instances)."""
        if price_limit is not None:
            return bid_price(on_demand, price_limit=price_limit)
        if discount_limit is not None:
            return bid_price(on_demand, discount=discount_limit)
        return None


@dataclass(frozen=True)
class PodResources:
    """What one pod takes: a role's own amounts (PAI's ResourceConfig, for Resource Quota jobs; the
    pod then takes part of a node), or as JobSpec.shape those of its instance type."""

    gpu: int
    cpu: int  # cores
    memory_mib: int
    instance_type: str = ""  # empty: the role's own amounts

    @property
    def cpu_m(self) -> int:
        return self.cpu * 1000

    def __str__(self) -> str:
        return self.instance_type or f"{self.gpu} GPU · {self.cpu} vCPU · {self.memory_mib / 1024:g} GiB each"


class PodKind(models.TextChoices):
    GUARANTEED = "guaranteed"
    IDLE = "idle"
    SPOT = "spot"
    PAYG = "payg", "pay-as-you-go"


class PodQuerySet(models.QuerySet):
    def locked(self):
        """These pods, each row locked (FOR UPDATE, not the joined rows), in lock order: after their
        jobs' rows (JobQuerySet.locked)."""
        return self.select_for_update(of=("self",)).order_by("pk")

    def holding(self):
        """The pods that hold capacity on a node: bound and not yet ended. The one definition of it:
        the scheduler, usage, quotas, nodes and the spot pool all count these."""
        return self.filter(node__isnull=False, status__in=LIVE_STATUSES)


def pod_name(job_id: str, role: str, index: int) -> str:
    """The name every incarnation of a pod shares: the SDK's PodId, stable across restarts."""
    return f"{job_id}-{role.lower()}-{index}"


def incarnation_id(name: str, incarnation: int) -> str:
    """An incarnation's own id (Pod.pod_id), unique: agents, reports and logs key pods by it."""
    return f"{name}-{incarnation}" if incarnation else name


class EndOrNever(models.Func):
    """A pod's finished_at, or the end of time while it runs: "still running after X" as one comparison
    that an index on this expression answers (an OR with IS NULL would not be read from the index).
    The constant is in the SQL, not a parameter, so that a prepared statement still matches the index."""

    output_field = models.DateTimeField()
    arity = 1
    template = "COALESCE(%(expressions)s, 'infinity'::timestamptz)"

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="COALESCE(%(expressions)s, '9999-12-31 23:59:59')", **extra)


class Pod(models.Model):
    """One process of a job. A restart makes a new incarnation; earlier ones are kept (current=False).

    `pod_id` names one incarnation (what the agents run); `name` is the pod across incarnations."""

    pod_id = models.CharField(max_length=128)  # unique: Meta.constraints
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="pods", db_index=False)
    role = models.CharField(max_length=32)
    index = models.PositiveIntegerField()
    incarnation = models.PositiveIntegerField(default=0)
    current = models.BooleanField(default=True)
    node = models.ForeignKey("quotas.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="pods",
                             db_index=False)
    gpu_indices = models.JSONField(default=list, blank=True)
    kind = models.CharField(max_length=16, choices=PodKind.choices, blank=True)
    cpu_m = models.PositiveIntegerField(default=0)
    mem_mib = models.PositiveIntegerField(default=0)
    gpu = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=PodStatus.choices, default=PodStatus.PENDING)
    sub_status = models.CharField(max_length=16, choices=PodSubStatus.choices, default=PodSubStatus.NORMAL)
    # Set when the scheduler asked the agent to stop the pod; capacity is freed only once it is gone.
    terminating = models.BooleanField(default=False)
    exit_code = models.IntegerField(null=True, blank=True)
    reason_code = models.CharField(max_length=64, blank=True)
    reason_message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    bound_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Its GPU-seconds are in GpuDayUse (jobs.usage_history.roll_up): the Usage page sums the pod from
    # there, no longer from its row.
    rolled_up = models.BooleanField(default=False)

    objects = PodQuerySet.as_manager()

    class Meta:
        # job_id, not job: ordering by the job joined jobs_job into every pod query (its created_at)
        ordering = ["job_id", "role", "index", "incarnation"]
        constraints = [
            models.UniqueConstraint(fields=["pod_id"], name="unique_pod_id"),
            # Also the index of a job's pods (a job has a handful: no (job, current) index).
            models.UniqueConstraint(fields=["job", "role", "index", "incarnation"], name="one_pod_per_incarnation"),
        ]
        indexes = [
            models.Index(fields=["node", "status"]),
            # The pods holding capacity, which every schedule cycle reads: a few hundred live
            # ones among all the finished pods ever run, which a table scan would read each cycle.
            models.Index(fields=["id"], condition=Q(node__isnull=False, status__in=LIVE_STATUSES),
                         name="pod_live_bound"),
            # The Usage page's GPU-hours of the pods not rolled up yet (running, or finished since the
            # last roll-up): a few among all the pods ever run, read from the index alone.
            models.Index(EndOrNever("finished_at"), include=["job", "started_at", "finished_at", "gpu", "kind"],
                         condition=Q(rolled_up=False), name="pod_unrolled_covering"),
            # The Usage page's preemptions: the few evicted pods among all, by when they ended.
            models.Index(fields=["finished_at"], condition=Q(sub_status=PodSubStatus.EVICTED),
                         name="pod_evicted_finished"),
        ]

    def __str__(self) -> str:
        return self.pod_id

    @property
    def name(self) -> str:
        return pod_name(self.job.job_id, self.role, self.index)

    @property
    def preempted(self) -> bool:
        return self.sub_status == PodSubStatus.EVICTED

    @property
    def status_label(self) -> str:
        return "Resource Preempted" if self.preempted else self.status


class GpuDayUse(models.Model):
    """GPU-seconds that finished pods used on one UTC day, per workspace, quota, user, job accessibility
    and pod kind (jobs.usage_history.roll_up writes them). The Usage page sums a range of whole days
    from these few rows instead of from every pod that ran in it; the pods' jobs' workspace, user and
    accessibility are here so that the same scope rule (jobs.services.visible_to) selects them. A key
    may have several rows (two roll-ups at once each add one): readers sum, and the next addition to
    the key folds them into one."""

    day = models.DateField()
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+", db_index=False)
    quota = models.ForeignKey(Quota, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                              db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False)
    accessibility = models.CharField(max_length=16, choices=Accessibility.choices)
    kind = models.CharField(max_length=16, choices=PodKind.choices, blank=True)
    gpu_seconds = models.FloatField(default=0)

    class Meta:
        indexes = [models.Index(fields=["day"], include=["workspace", "quota", "user", "accessibility", "kind",
                                                         "gpu_seconds"], name="gpu_day_use_covering")]


class Event(models.Model):
    class Type(models.TextChoices):
        NORMAL = "Normal"
        WARNING = "Warning"

    at = models.DateTimeField(default=timezone.now)
    type = models.CharField(max_length=16, choices=Type.choices, default=Type.NORMAL)
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)

    class Meta:
        abstract = True
        ordering = ["at", "id"]


class JobEvent(Event):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", db_index=False)

    class Meta(Event.Meta):
        indexes = [models.Index(fields=["job", "at"])]


class PodEvent(Event):
    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="events", db_index=False)

    class Meta(Event.Meta):
        indexes = [models.Index(fields=["pod", "at"])]


class StatusTransition(models.Model):
    """The job's status history (GetJob's StatusHistory)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="status_history")
    previous = models.CharField(max_length=16, choices=JobStatus.choices)
    status = models.CharField(max_length=16, choices=JobStatus.choices)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]


class RestartRecord(models.Model):
    """One AIMaster restart: why, when, and when the job ran again."""

    class Cause(models.TextChoices):
        FAILURE = "Failure"
        PREEMPTION = "Preemption"
        SPOT_RELEASE = "SpotReleased"
        NODE_LOST = "NodeLost"
        HANG = "Hang"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="restarts")
    cause = models.CharField(max_length=16, choices=Cause.choices)
    message = models.TextField(blank=True)
    counted = models.BooleanField(default=True, help_text="Counts against Maximum Job Restarts")
    at = models.DateTimeField(default=timezone.now)
    running_again_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["at", "id"]

    @property
    def duration_s(self) -> float | None:
        return (self.running_again_at - self.at).total_seconds() if self.running_again_at else None


class PodLog(models.Model):
    """A chunk of a pod's stdout/stderr as its agent shipped it; `offset` is its byte offset in the log."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="log_chunks")
    offset = models.BigIntegerField()
    end = models.BigIntegerField(help_text="offset + the chunk's length in bytes")
    text = models.TextField()
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["pod_id", "offset"]
        constraints = [models.UniqueConstraint(fields=["pod", "offset"], name="one_log_chunk_per_offset")]


class PodMetric(models.Model):
    """What a pod used at one moment, as its agent sampled it (agent/metrics.py): GetJobMetrics.
    Kept OPENDLC_POD_METRICS_RETENTION_S (jobs/metrics.py removes older samples)."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="metrics", db_index=False)
    at = models.DateTimeField()
    cpu_m = models.PositiveIntegerField(help_text="CPU in use, millicores")
    mem_mib = models.PositiveIntegerField(help_text="resident memory, MiB")
    gpu_util = models.PositiveSmallIntegerField(null=True, help_text="mean utilization of its GPUs, percent")
    gpu_mem_mib = models.PositiveIntegerField(null=True, help_text="memory used on its GPUs, MiB")

    class Meta:
        ordering = ["pod_id", "at"]
        indexes = [models.Index(fields=["pod", "at"]), models.Index(fields=["at"])]
