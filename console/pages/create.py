"""Create Job: the form of the PAI console, its HTMX refreshes, submission and Clone.

Fields appear and disappear with the chosen Resource Type, Source and Automatic Fault Tolerance:
with JavaScript a change re-renders the `form-body` partial (hx-post with `_action=refresh`, so the
form's values, hidden environment variables included, stay out of URLs and logs), without it the
"Apply" button posts the same and the page re-renders. A spot row's bid advisor refreshes alone
(console:bid-advice, with only that row's bid). Neither
validates; only Confirm does, first the form's shape and then jobs.services.create_job's rules.
"""

import re

from django.contrib.auth.decorators import login_required
from django.forms.utils import ErrorDict, ErrorList
from django.shortcuts import redirect

from console.forms import BID_FIELDS, BY_DISCOUNT, BY_PRICE_LIMIT, NODE_AMOUNTS, BidForm, JobForm, RoleFormSet
from console.pages.base import current_workspace, job_queryset, page
from console.pages.market_data import advise, market_rows
from datasets.services import JobCodeSource, JobDataSource
from jobs import aimaster
from jobs.models import Accessibility, Source
from jobs.services import DISPLAY_NAME_MAX, CustomEnv, JobRequest, PodResources, RoleRequest, ValidationFailed, create_job
from market import units
from market.bids import SPOT_WITH_PRICE_LIMIT

PREFIX = "roles"
REFRESH_ACTIONS = {"refresh", "add_role"}


@login_required
def job_create(request):
    workspace = current_workspace(request)
    if request.method == "POST":
        data = request.POST.copy()
        action = data.get("_action", "submit")
        if action in REFRESH_ACTIONS:
            form, roles = unvalidated(data, workspace, request.user, add_role=action == "add_role")
        else:
            form, roles = bind(data, workspace, request.user)
            job = submit(request, workspace, form, roles)
            if job is not None:
                return redirect("console:job-detail", job_id=job.job_id)
    elif "_refresh" in request.GET:
        form, roles = unvalidated(request.GET.copy(), workspace, request.user)
    else:
        form, roles = blank(request, workspace)
    context = form_context(form, roles, workspace)
    return page(request, "console/jobs/create.html", context, nav="create", partial="form-body")


def bind(data, workspace, user=None):
    form = JobForm(data, workspace=workspace, user=user)
    roles = RoleFormSet(data, prefix=PREFIX, form_kwargs={"resource_type": form.chosen_resource_type, "source": form.chosen_source})
    return form, roles


def unvalidated(data, workspace, user=None, *, add_role=False):
    """A bound form shown as typed, without errors: a refresh is not a submission."""
    if add_role:
        total = int(data.get(f"{PREFIX}-TOTAL_FORMS") or 0)
        data[f"{PREFIX}-TOTAL_FORMS"] = str(min(total + 1, RoleFormSet.max_num))
    form, roles = bind(data, workspace, user)
    form._errors = ErrorDict()
    roles._errors, roles._non_form_errors = [], ErrorList()
    for role_form in roles.forms:
        role_form._errors = ErrorDict()
    return form, roles


def blank(request, workspace):
    clone_id = request.GET.get("clone")
    source_job = job_queryset(request.user).filter(job_id=clone_id).first() if clone_id else None
    initial, role_initial = clone_initial(source_job) if source_job else ({}, [{"role": "Worker", "pod_count": 1}])
    form = JobForm(initial=initial, workspace=workspace, user=request.user)
    roles = RoleFormSet(
        initial=role_initial, prefix=PREFIX,
        form_kwargs={"resource_type": form.chosen_resource_type, "source": form.chosen_source},
    )
    form.clone_of = source_job
    return form, roles


def clone_initial(job):
    """The form's initial values from an existing job (Clone)."""
    specs = list(job.specs.select_related("spec").order_by("id"))
    vpc = job.user_vpc or {}
    initial = {
        "display_name": f"{job.display_name[:DISPLAY_NAME_MAX - len('-copy')]}-copy", "job_type": job.job_type,
        "image": specs[0].image if specs else "", "user_command": job.user_command,
        **_clone_about(job),
        "priority": job.priority, "max_running_time_minutes": job.max_running_time_minutes,
        "resource_type": job.resource_type, "source": job.source,
        "quota": job.quota.quota_id if job.quota else None, "oversold_type": job.oversold_type,
        "vpc_id": vpc.get("VpcId", ""), "switch_id": vpc.get("SwitchId", ""),
        "security_group_id": vpc.get("SecurityGroupId", ""),
        "ft_enabled": job.ft_enabled, **fault_tolerance_initial(job),
        "elastic_enabled": job.elastic_range is not None,
        "elastic_min": job.elastic_range[0] if job.elastic_range else 1,
        "elastic_in_place": job.resizes_in_place,
        "datasets": [d["data_source_id"] for d in job.data_sources or []],
        "code_source": job.code_source["code_source_id"] if job.code_source else None,
    }
    return initial, [role_initial(s) for s in specs]


def fault_tolerance_initial(job) -> dict:
    """The panel as AIMaster reads the job (its flags applied, whichever face wrote them), and in
    Other Configuration only the flags the panel has no field for."""
    config = aimaster.config_for(job)
    try:
        others = aimaster.other_flags(job.ft_other_config)
    except aimaster.OtherConfigError:
        others = job.ft_other_config
    return {"ft_run_type": config.run_type, "ft_max_restarts": config.max_restarts,
            "ft_hang_detection": config.hang_detection, "ft_hang_interval_minutes": max(1, config.hang_interval_s // 60),
            "ft_policy": config.policy, "ft_other_config": others}


def _clone_about(job) -> dict:
    """The copy's description, accessibility, tags and CustomEnvs: a visible one joins the variables,
    a hidden one is offered by name only, its value to be entered again."""
    shown = job.shown_custom_envs
    visible = [f"{e['Key']}={e['Value']}" for e in shown if e["Visible"]]
    return {
        "description": job.description, "accessibility": job.accessibility,
        "tags": "\n".join(f"{k}={v}" for k, v in (job.tags or {}).items()),
        "envs": "\n".join([*(f"{k}={v}" for k, v in (job.envs or {}).items()), *visible]),
        "hidden_envs": "\n".join(f"{e['Key']}=" for e in shown if not e["Visible"]),
    }


def role_initial(spec) -> dict:
    row = {"role": spec.role, "pod_count": spec.pod_count, **bid_initial(spec)}
    if spec.spec_id is not None:
        return row | {"spec": spec.spec.instance_type}
    # The API takes memory in MiB, the form whole GiB: round up, so the copy's pods get no less.
    return row | {"gpu": spec.gpu, "cpu": spec.cpu, "memory_gib": -(-spec.memory_mib // 1024)}


def bid_initial(spec) -> dict:
    """The row's bid as the form shows it: a discount, or a price limit per node-hour."""
    if spec.spot_price_limit is not None:
        return {"bid_kind": BY_PRICE_LIMIT, "bid_price_limit": f"{units.per_hour(spec.spot_price_limit).normalize()}"}
    discount = spec.spot_discount_limit
    return {"bid_kind": BY_DISCOUNT, "bid_discount": f"{discount.normalize()}" if discount is not None else None}


def submit(request, workspace, form, roles):
    """Create the job, or put every refusal next to its field and return None."""
    if not (form.is_valid() and roles.is_valid()):
        return None
    try:
        return create_job(request.user, to_request(form, roles, workspace))
    except ValidationFailed as failed:
        apply_service_errors(form, roles, failed.errors)
        return None


def to_request(form, roles, workspace) -> JobRequest:
    data = form.cleaned_data
    vpc = {k: data[f].strip() for k, f in VPC_FIELDS.items() if data[f].strip()}
    requested = [role_request(r, data) for r in roles.forms if r.cleaned_data and not roles._should_delete_form(r)]
    return JobRequest(
        display_name=data["display_name"], user_command=data["user_command"], job_type=data["job_type"],
        workspace_id=workspace.pk if workspace else None, envs=data["envs"], priority=data["priority"],
        resource_type=data["resource_type"], source=data["source"],
        quota_id=data["quota"].quota_id if data["quota"] else None,
        oversold_type=data["oversold_type"] if data["source"] == Source.QUOTA else None,
        user_vpc=vpc, max_running_time_minutes=data["max_running_time_minutes"],
        ft_enabled=data["ft_enabled"], ft_run_type=data["ft_run_type"], ft_max_restarts=data["ft_max_restarts"],
        ft_hang_detection=data["ft_hang_detection"], ft_hang_interval_s=data["ft_hang_interval_minutes"] * 60,
        ft_policy=data["ft_policy"], ft_other_config=data["ft_other_config"],
        description=data["description"], accessibility=data["accessibility"] or Accessibility.PUBLIC, tags=data["tags"],
        custom_envs=[CustomEnv(key=k, value=v, visible=False) for k, v in data["hidden_envs"].items()],
        roles=requested, elastic_spec=elastic_spec(data, requested),
        data_sources=[JobDataSource(d.dataset_id) for d in data["datasets"]],
        code_source=JobCodeSource(data["code_source"].code_source_id) if data["code_source"] else None,
    )


def elastic_spec(data: dict, roles: list[RoleRequest]) -> dict:
    """The ElasticSpec the API would send: the first role's Nodes are the job's MaxParallelism (create_job
    refuses an elastic job of more roles, or Nodes that are not its MaxParallelism)."""
    if not data["elastic_enabled"]:
        return {}
    return {"EnableElasticTraining": True, "MinParallelism": data["elastic_min"],
            "MaxParallelism": roles[0].pod_count if roles else None,
            **({"ResizeInPlace": True} if data.get("elastic_in_place") else {})}


def role_request(role_form, job: dict) -> RoleRequest:
    row = role_form.cleaned_data
    spot, spec = job["source"] == Source.SPOT, row["spec"]
    own = None if spec else PodResources(gpu=row["gpu"], cpu=row["cpu"], memory_mib=row["memory_gib"] * 1024)
    return RoleRequest(
        role=row["role"], pod_count=row["pod_count"], instance_type=spec.instance_type if spec else "",
        resources=own, image=job["image"],
        spot_strategy=SPOT_WITH_PRICE_LIMIT if spot else "",
        **(role_form.spot_limits() if spot else {}),
    )


VPC_FIELDS = {"VpcId": "vpc_id", "SwitchId": "switch_id", "SecurityGroupId": "security_group_id"}
# create_job's field names -> the form's.
JOB_FIELDS = {
    "quota_id": "quota", "ft_hang_interval_s": "ft_hang_interval_minutes", "custom_envs": "hidden_envs",
    "elastic_spec.EnableElasticTraining": "elastic_enabled", "elastic_spec.MinParallelism": "elastic_min",
    # Its MaxParallelism is the role's Nodes, which the form cannot set below the minimum on its own.
    "elastic_spec.MaxParallelism": "elastic_min", "elastic_spec.ResizeInPlace": "elastic_in_place",
    **{f"user_vpc.{k}": f for k, f in VPC_FIELDS.items()},
}
ROLE_FIELDS = {
    "role": "role", "pod_count": "pod_count", "instance_type": "spec", **BID_FIELDS,
    # The pods' own resources: the choice between them and a specification, then each amount.
    "resource_config": "spec", "resource_config.gpu": "gpu", "resource_config.cpu": "cpu",
    "resource_config.memory_mib": "memory_gib",
}
ROLE_KEY = re.compile(r"^roles\[(\d+)\]\.(\w+(?:\.\w+)?)$")


def apply_service_errors(form, roles, errors: dict[str, str]) -> None:
    """Show create_job's refusals next to the input they concern; the rest above the form."""
    live_roles = [r for r in roles.forms if not roles._should_delete_form(r)]
    for key, message in errors.items():
        match = ROLE_KEY.match(key)
        if match and match[2] == "image":
            form.add_error("image", message)
        elif match and int(match[1]) < len(live_roles) and match[2] in ROLE_FIELDS:
            role_form = live_roles[int(match[1])]
            role_form.add_error(ROLE_FIELDS[match[2]], message)
        elif key.startswith(("data_sources", "code_source")):
            form.add_error("datasets" if key.startswith("data_sources") else "code_source", message)
        elif key == "roles":
            roles._non_form_errors.append(message)
        elif JOB_FIELDS.get(key, key) in form.fields:
            form.add_error(JOB_FIELDS.get(key, key), message)
        else:
            form.add_error(None, f"{key}: {message}")


def form_context(form, roles, workspace) -> dict:
    markets = {m["spec"].instance_type: m for m in market_rows()}
    spot = form.chosen_source == Source.SPOT
    rows = []
    for role_form in roles.forms:
        value = role_form["spec"].value()
        market = markets.get(getattr(value, "instance_type", value))
        amounts = [role_form[name] for name in NODE_AMOUNTS if name in role_form.fields]  # Resource Quota only
        advice = advise(market["spec"], row_bid(role_form)) if spot and market else None
        rows.append({"form": role_form, "market": market, "amounts": amounts, "advice": advice})
    return {
        "form": form, "roles": roles, "role_rows": rows, "workspace": workspace,
        "show_quota": form.chosen_source == Source.QUOTA, "spot": spot,
        "can_add_role": len(roles.forms) < RoleFormSet.max_num, "clone_of": getattr(form, "clone_of", None),
    }


def row_bid(role_form) -> BidForm:
    """The row's bid alone, as typed (or as cloned), for the bid advisor."""
    if role_form.is_bound:
        return BidForm(role_form.data, prefix=role_form.prefix)
    return BidForm({role_form.add_prefix(k): v for k, v in role_form.initial.items() if v is not None},
                   prefix=role_form.prefix)
