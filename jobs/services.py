"""Jobs as users change them: create, stop, delete, reprioritise, and who may see or change what.

The REST API and the console form both call these functions with plain values (`JobRequest`);
every refusal is a `ValidationFailed` naming each field, what was wrong and what is allowed, or
`PermissionDenied`. Side effects outside the database (schedule cycles, stop messages to agents)
happen only after the transaction commits.
"""

from __future__ import annotations

import functools
import re
import secrets
import string
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from agent import images
from datasets.services import JobCodeSource, JobDataSource, resolve_job_sources
from dbkit import bulk
from jobs import aimaster, dispatch, history, lifecycle, usage_history
from jobs.cycle_requests import request_cycle
from jobs.models import (
    Accessibility, FaultTolerancePolicy, Job, JobEvent, JobSpec, JobType, OversoldType, Pod, PodResources, RunType,
    Source, pod_name,
)
from jobs.states import ACTIVE, FINAL, WAITING, JobStatus
from market.bids import DEFAULT_SPOT_DURATION_HOURS, validate_spot_bid
from quotas.models import Membership, Node, Quota, ResourceSpec, ResourceType, Role, Workspace
from quotas.tree import subtrees

WRITER_ROLES = (Role.OWNER, Role.ADMIN, Role.MEMBER)
ADMIN_ROLES = (Role.OWNER, Role.ADMIN)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # fullmatch: "$" would let a trailing newline in
ROLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{0,31}")
CLIENT_TOKEN = re.compile(r"[\x21-\x7e]{1,64}")
JOB_ID_ALPHABET = string.ascii_lowercase + string.digits


class ValidationFailed(Exception):
    """A request was refused; `errors` maps each bad field to what is wrong and what is allowed."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


@dataclass
class RoleRequest:
    role: str = "Worker"
    pod_count: int = 1
    instance_type: str = ""  # or, on a Resource Quota, `resources`
    image: str = ""
    image_config: dict = field(default_factory=dict)  # registry credentials (PAI's ImageConfig)
    command: str = ""  # empty: the job's user_command
    spot_strategy: str = ""  # "SpotWithPriceLimit" for a spot role
    spot_discount_limit: Decimal | None = None
    spot_price_limit: Decimal | None = None
    spot_duration_hours: int | None = None  # protection period, 0 or 1 (default 1)
    resources: PodResources | None = None  # the pods' own resources instead of an instance type


@dataclass
class JobRequest:
    display_name: str
    user_command: str
    roles: list[RoleRequest]
    job_type: str = JobType.PYTORCH
    workspace_id: int | None = None  # None: the user's default workspace
    envs: dict[str, str] = field(default_factory=dict)
    priority: int = 1
    resource_type: str = ResourceType.ECS
    source: str = Source.QUOTA  # 'quota' | 'spot' | 'public'
    quota_id: str | None = None  # the API's ResourceId (Quota.quota_id)
    oversold_type: str | None = None  # None: ForbiddenQuotaOverSold for a quota job
    user_vpc: dict[str, str] = field(default_factory=dict)
    ft_enabled: bool = False
    ft_run_type: str = RunType.SYNCHRONOUS
    ft_max_restarts: int = 3
    ft_hang_detection: bool = False
    ft_hang_interval_s: int = 1800
    ft_policy: str = FaultTolerancePolicy.EXIT_CODE_AND_ERROR_MSG
    ft_other_config: str = ""
    ft_max_preemption_restarts: int | None = None
    max_running_time_minutes: int | None = None
    termination_grace_s: int = 30
    # Registered datasets and code source the pods mount (datasets.services).
    data_sources: list[JobDataSource] = field(default_factory=list)
    code_source: JobCodeSource | None = None
    description: str = ""
    accessibility: str = Accessibility.PUBLIC
    custom_envs: list[CustomEnv] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)  # the user's own; `acs:` keys are the platform's
    elastic_spec: dict = field(default_factory=dict)  # PAI's ElasticSpec, kept as given
    client_token: str = ""  # an idempotency key: a retry with the same one gets the same job


@dataclass
class CustomEnv:
    """One of PAI's CustomEnvs: a variable whose value, when not visible, is never shown back."""

    key: str
    value: str
    visible: bool = True


# ---- permissions ------------------------------------------------------------------------


def visible_jobs(user):
    """Jobs of the workspaces the user is a member of (any role, viewers included): the PUBLIC ones,
    and the PRIVATE ones the user owns or whose workspace the user owns or administers."""
    return Job.objects.filter(visible_to(user))


def visible_to(user) -> Q:
    """visible_jobs' rule as a condition on the fields `workspace`, `user` and `accessibility`, which
    the rows summed from jobs carry too (jobs.models.GpuDayUse, spot.models.DailyBill): one rule for
    the jobs and for what they used.

    The user's workspaces are read first and given as constants, not joined: lists can then sort and
    count on the (workspace, -created_at) index without DISTINCT, and PostgreSQL estimates how many
    rows each workspace holds, which a subquery hid from it (it then read every job of the scope to
    join the Usage page's few evicted pods)."""
    roles = dict(Membership.objects.filter(user=user).values_list("workspace_id", "role"))
    administered = [workspace for workspace, role in roles.items() if role in ADMIN_ROLES]
    return ((Q(accessibility=Accessibility.PUBLIC) | Q(user=user) | Q(workspace_id__in=administered))
            & Q(workspace_id__in=sorted(roles)))


def can_change(user, job: Job) -> bool:
    """PAI's rule: the owners and admins of the job's workspace may stop, delete or change any of its
    jobs; a member only the jobs they submitted; a viewer none."""
    role = Membership.objects.filter(workspace_id=job.workspace_id, user=user).values_list("role", flat=True).first()
    return role in ADMIN_ROLES or (role in WRITER_ROLES and job.user_id == user.pk)


def _require_change(user, job: Job) -> None:
    if not can_change(user, job):
        raise PermissionDenied(f"you may not change job {job.job_id}: only the user who submitted it, or an owner "
                               "or admin of its workspace, may")


# ---- create -------------------------------------------------------------------------------


def create_job(user, request: JobRequest, now=None) -> Job:
    """Validate, store the job with its roles and pods, queue it and ask for a schedule cycle.

    With a client_token, the job the same user submitted to the same workspace with that token
    before is returned instead of a new one: the request is not compared, the token names it."""
    now = now or timezone.now()
    resolved = _Validation(user, request).run()
    token, workspace = request.client_token, resolved["workspace"]
    if token and (earlier := _submitted_with(user, workspace, token)):
        return earlier
    _check_waiting_room(workspace)
    if not token:
        job = _store_job(user, request, resolved, now)  # all or nothing (one statement on PostgreSQL)
    else:
        try:
            with transaction.atomic():  # a savepoint: the caller's transaction survives a lost race
                job = _store_job(user, request, resolved, now)
        except IntegrityError:
            if earlier := _submitted_with(user, workspace, token):  # a concurrent retry stored it first
                return earlier
            raise
    request_cycle()  # at once, or when the caller's transaction commits
    return job


def _submitted_with(user, workspace: _Named, token: str) -> Job | None:
    return Job.objects.filter(user=user, workspace_id=workspace.pk, client_token=token).first()


def _check_waiting_room(workspace: _Named) -> None:
    """A workspace holds at most OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE waiting jobs (0: no limit),
    since each cycle reads every waiting job. Counted without a lock: concurrent submissions may pass
    it by a few."""
    limit = settings.OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE
    if limit and Job.objects.filter(workspace_id=workspace.pk, status__in=WAITING).count() >= limit:
        raise ValidationFailed({"workspace_id": f"workspace {workspace.name} already has {limit} waiting jobs, the most "
                                                "it may have; submit again once some have started or been stopped"})


def _store_job(user, req: JobRequest, resolved: dict, now) -> Job:
    """The job row is inserted already Queuing (Bidding for spot), its Creating -> Queuing step
    recorded alongside: one insert instead of an insert and an update. The job, its history,
    event, roles and pods go in as one family (bulk.insert_family: one statement on PostgreSQL)."""
    job = Job(
        job_id=new_job_id(), workspace_id=resolved["workspace"].pk, user=user, created_at=now,
        display_name=req.display_name.strip(), job_type=req.job_type, user_command=req.user_command,
        envs=dict(req.envs), priority=req.priority, resource_type=req.resource_type, source=req.source,
        quota_id=resolved["quota"] and resolved["quota"].pk, oversold_type=req.oversold_type or OversoldType.FORBIDDEN,
        user_vpc=dict(req.user_vpc), max_running_time_minutes=req.max_running_time_minutes,
        termination_grace_s=req.termination_grace_s, ft_enabled=req.ft_enabled, ft_run_type=req.ft_run_type,
        ft_max_restarts=req.ft_max_restarts, ft_hang_detection=req.ft_hang_detection,
        ft_hang_interval_s=req.ft_hang_interval_s, ft_policy=req.ft_policy, ft_other_config=req.ft_other_config,
        ft_max_preemption_restarts=req.ft_max_preemption_restarts, submitted_at=now,
        description=req.description.strip(), accessibility=req.accessibility, tags=dict(req.tags),
        custom_envs=[{"Key": e.key, "Value": e.value, "Visible": e.visible} for e in req.custom_envs],
        elastic_spec=dict(req.elastic_spec), client_token=req.client_token,
    )
    job.data_sources, job.code_source = resolved["data_sources"], resolved["code_source"]
    target = JobStatus.BIDDING if job.source == Source.SPOT else JobStatus.QUEUING
    steps, events = history.history_rows([history.transition(job, target, reason="JobSubmitted",
                                                         message=f"Job submitted; status {target}", at=now)])
    if job.ft_enabled:
        events += [JobEvent(job=job, at=now, reason="AIMasterFlagIgnored", message=note)
                   for note in aimaster.no_effect_notes(job.ft_other_config)]
    rows = [*steps, *events]
    for role, spec in zip(req.roles, resolved["specs"]):
        rows += _role_rows(job, role, spec, now)
    bulk.insert_family(job, rows)
    return job


def _role_rows(job: Job, role: RoleRequest, spec: ResourceSpec | None, now) -> list[JobSpec | Pod]:
    own = role.resources if spec is None else None
    row = JobSpec(
        role=role.role, pod_count=role.pod_count, spec=spec, image=role.image, image_config=role.image_config or {},
        command=role.command,
        cpu=own and own.cpu, memory_mib=own and own.memory_mib, gpu=own and own.gpu,
        spot_strategy=role.spot_strategy, spot_discount_limit=role.spot_discount_limit,
        spot_price_limit=role.spot_price_limit,
        spot_duration_hours=DEFAULT_SPOT_DURATION_HOURS if role.spot_duration_hours is None else role.spot_duration_hours,
    )
    shape = own or spec
    return [row, *(Pod(pod_id=pod_name(job.job_id, role.role, i), role=role.role, index=i, incarnation=0,
                       cpu_m=shape.cpu_m, mem_mib=shape.memory_mib, gpu=shape.gpu, created_at=now)
                   for i in range(role.pod_count))]


def new_job_id() -> str:
    return "dlc" + "".join(secrets.choice(JOB_ID_ALPHABET) for _ in range(12))


class _Named(NamedTuple):
    pk: int
    name: str


def _read(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


# _Validation's two reads (_workspace, _quota), in SQL: they are the same on every call, and building
# them with the ORM took more of create_job's client CPU than storing the job (bench/create_job.py).
_MEMBERSHIPS_SQL = (f"SELECT m.workspace_id, w.name, m.role, m.is_default FROM {Membership._meta.db_table} m "
                    f"JOIN {Workspace._meta.db_table} w ON w.id = m.workspace_id WHERE m.user_id = %s "
                    "ORDER BY m.workspace_id")
_QUOTA_SQL = (f"SELECT q.id, q.name, q.resource_type, EXISTS (SELECT 1 FROM {Quota.workspaces.through._meta.db_table} b "
              f"WHERE b.quota_id = q.id AND b.workspace_id = %s) FROM {Quota._meta.db_table} q WHERE q.quota_id = %s")


class _Validation:
    """Every problem of a JobRequest at once; resolves the workspace, quota and instance types.

    The workspace and the quota are read as values (pk and name), in one query each: model
    instances and a query per step were a large share of create_job's time.
    """

    def __init__(self, user, req: JobRequest):
        self.user, self.req = user, req
        self.errors: dict[str, str] = {}
        self.workspace = self.quota = None
        self.specs: list[ResourceSpec | None] = []
        self.data_sources: list[dict] = []
        self.code_source: dict | None = None

    def run(self) -> dict:
        self._basics()
        self._workspace()
        self._source_and_quota()
        self._roles()
        self._capacity()
        self._settings()
        self._sources()
        if self.errors:
            raise ValidationFailed(self.errors)
        return {"workspace": self.workspace, "quota": self.quota, "specs": self.specs,
                "data_sources": self.data_sources, "code_source": self.code_source}

    def error(self, name: str, message: str) -> None:
        self.errors.setdefault(name, message)

    def _basics(self) -> None:
        req = self.req
        if not isinstance(req.display_name, str) or not req.display_name.strip():
            self.error("display_name", f"is required (1 to {DISPLAY_NAME_MAX} characters)")
        elif len(req.display_name) > DISPLAY_NAME_MAX:
            self.error("display_name", f"is {len(req.display_name)} characters long; at most {DISPLAY_NAME_MAX} allowed")
        if not isinstance(req.user_command, str) or not req.user_command.strip():
            self.error("user_command", "is required: the command every pod runs unless its role sets one")
        elif len(req.user_command) > COMMAND_MAX:
            self.error("user_command", f"is {len(req.user_command)} characters long; at most {COMMAND_MAX} allowed")
        _choice(self, "job_type", req.job_type, JobType)
        if not _int_between(req.priority, 1, 9):
            self.error("priority", f"must be an integer from 1 to 9 (9 is the highest), got {req.priority!r}")
        _choice(self, "resource_type", req.resource_type, ResourceType)
        _choice(self, "source", req.source, Source)

    def _workspace(self) -> None:
        # All of the user's memberships (a few) in workspace order, chosen from here.
        memberships = _read(_MEMBERSHIPS_SQL, [self.user.pk])
        if self.req.workspace_id is None:
            chosen = next((m for m in memberships if m[3]), memberships[0] if memberships else None)
            if chosen is None:
                return self.error("workspace_id", "you are a member of no workspace; ask a workspace owner to add you")
        else:
            wid = str(self.req.workspace_id)
            chosen = next((m for m in memberships if str(m[0]) == wid), None)  # ASCII digits only, as ids print
            if chosen is None:
                return self.error("workspace_id", f"workspace {self.req.workspace_id!r} does not exist or you are not a member of it")
        workspace_id, name, role, _ = chosen
        if role not in WRITER_ROLES:
            return self.error("workspace_id", f"you are a {role} of workspace {name}; "
                                              "creating jobs needs owner, admin or member")
        self.workspace = _Named(workspace_id, name)

    def _source_and_quota(self) -> None:
        req = self.req
        if req.oversold_type is not None:
            _choice(self, "oversold_type", req.oversold_type, OversoldType)
        if req.source != Source.QUOTA:
            if req.quota_id:
                self.error("quota_id", f"is only for source 'quota' (Resource Quota), not {req.source!r}")
            if req.oversold_type is not None:
                self.error("oversold_type", "is only for jobs on a Resource Quota (source 'quota')")
            return
        if not req.quota_id:
            return self.error("quota_id", "is required for source 'quota': the ResourceId of a quota bound to the workspace")
        self._quota(req.quota_id)

    def _quota(self, quota_id: str) -> None:
        # One query: the quota and whether it is bound to the workspace.
        found = _read(_QUOTA_SQL, [self.workspace.pk if self.workspace else None, str(quota_id)])
        if not found:
            return self.error("quota_id", f"no quota with ResourceId {quota_id!r}")
        (pk, name, resource_type, is_bound), = found
        if self.workspace is not None and not is_bound:
            return self.error("quota_id", f"quota {name} ({quota_id}) is not bound to workspace {self.workspace.name}")
        if resource_type != self.req.resource_type:
            return self.error("quota_id", f"quota {name} is of resource type {resource_type}, "
                                          f"the job asks for {self.req.resource_type}")
        self.quota = _Named(pk, name)

    def _roles(self) -> None:
        roles = self.req.roles
        if not isinstance(roles, (list, tuple)) or not roles:
            return self.error("roles", "at least one role (e.g. Worker) with a pod count and an instance type is required")
        if len(roles) > ROLES_MAX:
            return self.error("roles", f"has {len(roles)} roles; a job has at most {ROLES_MAX}")
        pods = sum(r.pod_count for r in roles if _int_between(r.pod_count, 1, PODS_MAX))
        if pods > PODS_MAX:
            self.error("roles", f"ask for {pods} pods in all; a job has at most {PODS_MAX}")
        names = [r.role for r in roles]
        for i, role in enumerate(roles):
            _RoleCheck(self, i, role).run()
            if names.count(role.role) > 1:
                self.error(f"roles[{i}].role", f"role {role.role!r} is given more than once; each role once")

    def _capacity(self) -> None:
        """Refuse a job that could never start: more pods of an instance type than its quota tree or
        the public pool has nodes of it, or more GPUs, vCPUs or memory in all than they have."""
        req = self.req
        if self.errors or len(self.specs) != len(req.roles) or (req.source == Source.QUOTA and self.quota is None):
            return  # a role or the quota is refused already: its own message says why
        nodes = scope_nodes(self.quota.pk if req.source == Source.QUOTA else None)
        where = f"quota {self.quota.name}'s tree" if req.source == Source.QUOTA else "the public pool"
        by_type: dict[str, list[int]] = {}
        for i, (role, spec) in enumerate(zip(req.roles, self.specs)):
            if spec is not None:
                by_type.setdefault(spec.instance_type, []).append(i)
        for itype, indices in by_type.items():
            asked, have = sum(req.roles[i].pod_count for i in indices), sum(1 for n in nodes if n[0] == itype)
            if asked > have:
                self.error(f"roles[{indices[-1]}].pod_count",
                           f"the job asks for {asked} pods of {itype}, one node each, and {where} has {have} such "
                           f"node{'s' if have != 1 else ''}: it could never start")
        own = [(r.pod_count, r.resources) for r, s in zip(req.roles, self.specs) if s is None and r.resources]
        for name, index, unit in (("GPUs", 1, ""), ("vCPUs", 2, ""), ("memory", 3, " MiB")):
            asked = sum(count * (res.gpu, res.cpu, res.memory_mib)[index - 1] for count, res in own)
            have = sum(n[index] for n in nodes)
            if own and asked > have:
                self.error("roles", f"the job's pods ask for {asked}{unit} {name} in all, and {where} has "
                                    f"{have}{unit}: it could never start")

    def _settings(self) -> None:
        req = self.req
        if not isinstance(req.envs, dict):
            self.error("envs", "must be a mapping of variable names to string values")
        elif problem := env_problem(req.envs.items()):
            self.error("envs", problem)
        self._custom_envs()
        self._about()
        if not isinstance(req.user_vpc, dict):
            self.error("user_vpc", "must be a mapping with VpcId, SwitchId, SecurityGroupId")
        elif bad := sorted(k for k, v in req.user_vpc.items() if not _short_texts(v)):
            self.error("user_vpc", f"{', '.join(bad)} must be text (or a list of texts) of at most {NAME_MAX} characters")
        if req.max_running_time_minutes is not None and not _int_between(req.max_running_time_minutes, 1, 525600):
            self.error("max_running_time_minutes", f"must be empty (no limit) or 1 to 525600, got {req.max_running_time_minutes!r}")
        if not _int_between(req.termination_grace_s, 0, 3600):
            self.error("termination_grace_s", f"must be 0 to 3600 seconds, got {req.termination_grace_s!r}")
        self._fault_tolerance()
        if req.client_token != "" and not (isinstance(req.client_token, str) and CLIENT_TOKEN.fullmatch(req.client_token)):
            self.error("client_token", "must be 1 to 64 printable ASCII characters without spaces, such as a UUID")

    def _sources(self) -> None:
        """The datasets and code source must be the workspace's; read only when the job names some."""
        req = self.req
        if not req.data_sources and req.code_source is None:
            return
        self.data_sources, self.code_source = resolve_job_sources(
            self.user, self.workspace.pk if self.workspace else None, list(req.data_sources), req.code_source,
            self.errors)

    def _custom_envs(self) -> None:
        envs = self.req.custom_envs
        if not isinstance(envs, list) or not all(isinstance(e, CustomEnv) for e in envs):
            return self.error("custom_envs", "must be a list of {Key, Value, Visible}")
        if problem := env_problem((e.key, e.value) for e in envs):
            return self.error("custom_envs", problem)
        keys = [e.key for e in envs]
        if twice := sorted({k for k in keys if keys.count(k) > 1}):
            return self.error("custom_envs", f"{', '.join(twice)} given more than once; each variable once")
        if bad := [e.key for e in envs if not isinstance(e.visible, bool)]:
            self.error("custom_envs", f"Visible of {', '.join(bad)} must be true or false")

    def _about(self) -> None:
        """Description, Accessibility, Tags and ElasticSpec: what the job says about itself."""
        req = self.req
        if not isinstance(req.description, str) or len(req.description) > DESCRIPTION_MAX:
            self.error("description", f"must be text of at most {DESCRIPTION_MAX} characters")
        _choice(self, "accessibility", req.accessibility, Accessibility)
        if problem := tags_problem(req.tags):
            self.error("tags", problem)
        if not isinstance(req.elastic_spec, dict):
            self.error("elastic_spec", "must be an object")
        elif req.elastic_spec.get("EnableElasticTraining"):
            self._elastic()
        elif req.elastic_spec.get("ResizeInPlace"):
            self.error("elastic_spec.ResizeInPlace", "applies to elastic training only (EnableElasticTraining true)")

    def _elastic(self) -> None:
        """An elastic job (jobs/elastic.py) has one role, its workers, on a Resource Quota; the
        role's pod count is its MaxParallelism, and it starts once MinParallelism of them fit."""
        req, spec = self.req, self.req.elastic_spec
        if spec.get("EnableElasticTraining") is not True:
            return self.error("elastic_spec.EnableElasticTraining", "must be true or false")
        low, high = spec.get("MinParallelism"), spec.get("MaxParallelism")
        if not _int_between(low, 1, PODS_MAX):
            return self.error("elastic_spec.MinParallelism", f"must be an integer from 1 to {PODS_MAX} for elastic "
                                                             f"training, got {low!r}")
        if not _int_between(high, low, PODS_MAX):
            return self.error("elastic_spec.MaxParallelism", f"must be an integer from MinParallelism ({low}) to "
                                                             f"{PODS_MAX} for elastic training, got {high!r}")
        if not isinstance(spec.get("ResizeInPlace", False), bool):
            return self.error("elastic_spec.ResizeInPlace", f"must be true or false, got {spec['ResizeInPlace']!r}")
        if req.source != Source.QUOTA:
            return self.error("elastic_spec.EnableElasticTraining", "elastic training runs on a Resource Quota "
                                                                    f"(source 'quota'), not {req.source!r}")
        roles = req.roles if isinstance(req.roles, (list, tuple)) else []
        if len(roles) != 1:
            return self.error("roles", f"an elastic job has one role, its workers; this one has {len(roles)}")
        if roles[0].pod_count != high:
            self.error("roles[0].pod_count", f"is {roles[0].pod_count!r}; an elastic job's role has "
                                             f"MaxParallelism ({high}) pods")

    def _fault_tolerance(self) -> None:
        req = self.req
        _choice(self, "ft_run_type", req.ft_run_type, RunType)
        _choice(self, "ft_policy", req.ft_policy, FaultTolerancePolicy)
        if not _int_between(req.ft_max_restarts, 0, 100):
            self.error("ft_max_restarts", f"must be 0 to 100, got {req.ft_max_restarts!r}")
        if not _int_between(req.ft_hang_interval_s, 60, 86400):
            self.error("ft_hang_interval_s", f"must be 60 to 86400 seconds, got {req.ft_hang_interval_s!r}")
        if req.ft_max_preemption_restarts is not None and not _int_between(req.ft_max_preemption_restarts, 0, 1000):
            self.error("ft_max_preemption_restarts", "must be empty (unlimited) or 0 to 1000")
        if not isinstance(req.ft_other_config, str) or len(req.ft_other_config) > OTHER_CONFIG_MAX:
            self.error("ft_other_config", f"must be text of at most {OTHER_CONFIG_MAX} characters")
        elif problem := aimaster.other_config_error(req.ft_other_config or ""):
            self.error("ft_other_config", problem)


class _RoleCheck:
    def __init__(self, check: _Validation, i: int, role: RoleRequest):
        self.check, self.role, self.at = check, role, f"roles[{i}]"
        self.spec = None

    def error(self, name: str, message: str) -> None:
        self.check.error(f"{self.at}.{name}", message)

    def run(self) -> None:
        role = self.role
        if not isinstance(role.role, str) or not ROLE_NAME.fullmatch(role.role):
            self.error("role", f"must be a name such as Worker, Master or PS (letters and digits), got {role.role!r}")
        if not _int_between(role.pod_count, 1, PODS_MAX):
            self.error("pod_count", f"must be an integer from 1 to {PODS_MAX}, got {role.pod_count!r}")
        if not isinstance(role.command, str) or len(role.command) > COMMAND_MAX:
            self.error("command", f"must be text of at most {COMMAND_MAX} characters (empty: the job's command)")
        if problem := images.reference_problem(role.image):
            self.error("image", problem)
        if problem := images.config_problem(role.image_config):
            self.error("image_config", problem)
        if role.resources is not None:
            self._own_resources()
        else:
            self._instance_type()
        self._spot()
        self.check.specs.append(self.spec)

    def _instance_type(self) -> None:
        if not self.role.instance_type and self.check.req.source == Source.QUOTA:
            return self.error("instance_type", "is required: an instance type (EcsSpec), or the pods' own resources "
                                               "(ResourceConfig) on a Resource Quota")
        spec = ResourceSpec.objects.filter(instance_type=self.role.instance_type).first()
        if spec is None:
            known = ", ".join(ResourceSpec.objects.filter(resource_type=self.check.req.resource_type)
                              .values_list("instance_type", flat=True))
            return self.error("instance_type", f"unknown instance type {self.role.instance_type!r}; "
                                               f"{self.check.req.resource_type} offers: {known or 'none'}")
        if spec.resource_type != self.check.req.resource_type:
            return self.error("instance_type", f"{spec.instance_type} is a {spec.resource_type} instance type; "
                                               f"the job's resource type is {self.check.req.resource_type}")
        self.spec = spec

    def _own_resources(self) -> None:
        role, req, own = self.role, self.check.req, self.role.resources
        if role.instance_type:
            return self.error("resource_config", "give an instance type (EcsSpec) or the pod's resources "
                                                 "(ResourceConfig), not both")
        if req.source != Source.QUOTA:
            return self.error("resource_config", "a pod's own resources (ResourceConfig) are for Resource Quota jobs "
                                                 "(source 'quota'); Public and Preemptible Resources take an "
                                                 "instance type (EcsSpec)")
        bad = False
        for name, (low, high, unit) in POD_RESOURCE_LIMITS.items():
            value = getattr(own, name)
            if not _int_between(value, low, high):
                bad = True
                self.error(f"resource_config.{name}", f"must be a whole number of {unit} from {low} to {high}, "
                                                      f"got {value!r}")
        if bad or self.check.quota is None:
            return
        shapes = {(g, c, m) for _, g, c, m in scope_nodes(self.check.quota.pk)}
        if not any(own.gpu <= g and own.cpu <= c and own.memory_mib <= m for g, c, m in shapes):
            largest = ", ".join(f"{g} GPU / {c} vCPU / {m / 1024:g} GiB" for g, c, m in sorted(shapes, reverse=True)[:3])
            self.error("resource_config", f"no node of quota {self.check.quota.name}'s tree has room for a pod of "
                                          f"{own.gpu} GPU / {own.cpu} vCPU / {own.memory_mib / 1024:g} GiB; "
                                          f"its nodes: {largest or 'none'}")

    def _spot(self) -> None:
        role, req = self.role, self.check.req
        bids = role.spot_strategy or role.spot_discount_limit is not None or role.spot_price_limit is not None
        if req.source != Source.SPOT:
            if bids:
                self.error("spot_strategy", "a bid is only for source 'spot' (Preemptible Resources)")
            return
        if self.spec is None or req.resource_type not in _allowed(ResourceType):
            return
        if not self.spec.nodes.filter(quota=None).exists():
            pools = ", ".join(ResourceSpec.objects.filter(resource_type=req.resource_type, nodes__quota=None)
                              .distinct().values_list("instance_type", flat=True))
            return self.error("instance_type", f"{self.spec.instance_type} has no preemptible resources (no public "
                                               f"pool); preemptible {req.resource_type} types: {pools or 'none'}")
        spot_spec = {"SpotStrategy": role.spot_strategy, "SpotDiscountLimit": role.spot_discount_limit,
                     "SpotPriceLimit": role.spot_price_limit}
        for problem in validate_spot_bid(spot_spec, resource_type=req.resource_type,
                                         on_demand_price=self.spec.on_demand_price_per_minute,
                                         user_vpc=req.user_vpc if isinstance(req.user_vpc, dict) else {},
                                         spot_duration=role.spot_duration_hours):
            self._spot_error(problem["field"], problem["message"])

    def _spot_error(self, api_field: str, message: str) -> None:
        if api_field.startswith("UserVpc."):
            return self.check.error(f"user_vpc.{api_field.split('.', 1)[1]}", message)
        name = SPOT_FIELDS.get(api_field, "spot_strategy")
        self.error(name, message)


# The spot validator speaks the API's names; the request speaks ours.
SPOT_FIELDS = {
    "SpotSpec.SpotStrategy": "spot_strategy",
    "SpotSpec.SpotDiscountLimit": "spot_discount_limit",
    "SpotSpec.SpotPriceLimit": "spot_price_limit",
    "SpotSpec": "spot_discount_limit",
    "SpotDuration": "spot_duration_hours",
}


# What a pod may give itself (ResourceConfig): PodResources field -> (lowest, highest, unit).
POD_RESOURCE_LIMITS = {"gpu": (0, 1024, "GPUs"), "cpu": (1, 4096, "vCPU cores"),
                       "memory_mib": (1, 64 * 1024 * 1024, "MiB")}


# The node shapes a ResourceConfig pod is checked against are kept this long per quota (Django's
# cache: per process unless CACHES says otherwise), since reading them on every call was a large
# share of create_job's database time. A node added or removed shows here within the TTL; the
# scheduler, which reads the nodes every cycle, decides where the pod fits.
NODE_SHAPES_TTL_S = 10


def scope_nodes(quota_pk: int | None) -> list[tuple[str, int, int, int]]:
    """(instance type, GPUs, vCPU cores, MiB) of every node a job may ever run on: those of its quota's
    tree (its root quota and all below it, where the scheduler may place the quota's pods), or of
    the public pool (None). Cached briefly: every submission asks, nodes rarely change."""
    def read():
        nodes = Node.objects.filter(quota=None) if quota_pk is None else Node.objects.filter(
            quota_id__in=max((members for members in subtrees().values() if quota_pk in members), key=len))
        return list(nodes.order_by().values_list("spec__instance_type", "spec__gpu", "spec__cpu", "spec__memory_mib"))
    return cache.get_or_set(f"opendlc:scope-nodes:{quota_pk or 'public'}", read, NODE_SHAPES_TTL_S)


# What one job may ask for; past these a request is refused by name. Every pod is a row that each
# schedule cycle reads and that DeleteJob removes, so a job's size is bounded, as a PAI job's is.
NAME_MAX = 128  # PAI's length for names: variables, VPC ids
DISPLAY_NAME_MAX = NAME_MAX  # PAI's console takes job names of 1 to 128 characters
ROLES_MAX = 16
PODS_MAX = 1000  # per role and for the whole job
# A command reaches the pod as one argument of `bash -c`, and Linux takes at most 128 KiB for one.
COMMAND_MAX = 32 * 1024
ENVS_MAX, ENV_VALUE_MAX = 256, 32 * 1024
OTHER_CONFIG_MAX = 1024  # Job.ft_other_config's column
DESCRIPTION_MAX = 1024
TAGS_MAX, TAG_KEY_MAX, TAG_VALUE_MAX = 20, 128, 256
PLATFORM_TAG_PREFIX = "acs:"  # the platform's own tags (acs:pai:dlc:payType), never the user's


def env_problem(items) -> str | None:
    """What is wrong with (name, value) pairs of environment variables, or None: the one check of
    Envs, CustomEnvs and the console's variables."""
    items = list(items)
    bad = sorted(str(k) for k, v in items if not isinstance(k, str) or not ENV_NAME.fullmatch(k) or not isinstance(v, str))
    if bad:
        return f"invalid entries {bad}: names are letters, digits and _ (at most {NAME_MAX}), values strings"
    if len(items) > ENVS_MAX:
        return f"has {len(items)} variables; at most {ENVS_MAX}"
    if long := sorted(k for k, v in items if len(v) > ENV_VALUE_MAX):
        return f"the values of {', '.join(long)} are longer than {ENV_VALUE_MAX} characters"
    return None


def tags_problem(tags) -> str | None:
    if not isinstance(tags, dict):
        return "must be an object of tag keys to values"
    if len(tags) > TAGS_MAX:
        return f"has {len(tags)} tags; at most {TAGS_MAX}"
    for key, value in tags.items():
        if not isinstance(key, str) or not key.strip() or len(key) > TAG_KEY_MAX:
            return f"key {key!r} must be 1 to {TAG_KEY_MAX} characters"
        if key.startswith(PLATFORM_TAG_PREFIX):
            return f"key {key!r}: keys starting with {PLATFORM_TAG_PREFIX!r} are the platform's own"
        if not isinstance(value, str) or len(value) > TAG_VALUE_MAX:
            return f"value of {key!r} must be text of at most {TAG_VALUE_MAX} characters"
    return None


def _choice(check: _Validation, name: str, value: Any, choices: type) -> None:
    if value not in _allowed(choices):
        check.error(name, f"must be one of {', '.join(_allowed(choices))}, got {value!r}")


@functools.cache
def _allowed(choices: type) -> tuple[str, ...]:
    """A choices class's values: Django's `.values` builds a new list at every call, nine a job."""
    return tuple(choices.values)


def _short_texts(value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    return all(isinstance(v, str) and len(v) <= NAME_MAX for v in values)


def _int_between(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


# ---- stop, delete, priority -----------------------------------------------------------------


def stop_job(user, job: Job, now=None) -> Job:
    """Waiting jobs stop at once; active ones go Stopping until the agents report their pods gone."""
    _require_change(user, job)
    now = now or timezone.now()
    with transaction.atomic():
        # Lock the job row: a schedule cycle admitting it at this moment waits, then sees Stopped.
        job = Job.objects.locked().get(pk=job.pk)
        if job.status in (JobStatus.STOPPING, JobStatus.STOPPED):
            return job
        if job.status in FINAL:
            raise ValidationFailed({"status": f"job {job.job_id} already ended ({job.status}); "
                                              "only Queuing, Bidding or running jobs can be stopped"})
        if job.status in WAITING or job.status == JobStatus.CREATING:
            history.change_status(job, JobStatus.STOPPED, reason="StoppedByUser", message=f"Stopped by {user}", now=now)
        else:
            lifecycle.begin_stopping(job, "StoppedByUser", f"Stopped by {user}", dispatch.STOPPED, now)
        request_cycle()
    return job


def delete_job(user, job: Job) -> None:
    """Delete an ended or still waiting job with its pods, events and history."""
    _require_change(user, job)
    with transaction.atomic():
        job = Job.objects.locked().get(pk=job.pk)
        if job.status in ACTIVE:
            raise ValidationFailed({"status": f"job {job.job_id} is {job.status}; stop it before deleting it"})
        # A waiting job has no bound pod, so nothing runs anywhere. The pods go in batches: with
        # their events, logs and metrics in one delete, a large job's statement had too many parameters.
        usage_history.forget(job)
        bulk.delete_in_batches(Pod.objects.filter(job=job))
        job.delete()
        request_cycle()


def update_job_priority(user, job: Job, priority: int) -> Job:
    """Change the priority (1-9); a waiting job takes its new place in the next cycle."""
    _require_change(user, job)
    if not _int_between(priority, 1, 9):
        raise ValidationFailed({"priority": f"must be an integer from 1 to 9 (9 is the highest), got {priority!r}"})
    with transaction.atomic():
        job = Job.objects.locked().get(pk=job.pk)
        if job.status in FINAL:
            raise ValidationFailed({"priority": f"job {job.job_id} already ended ({job.status})"})
        job.priority = priority
        job.save(update_fields=["priority", "modified_at"])
        job.events.create(reason="PriorityChanged", message=f"Priority set to {priority} by {user}")
        request_cycle()
    return job
