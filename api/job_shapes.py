"""DLC 2020-12-03 request and response shapes: the SDK's CreateJobRequest onto a JobRequest, and a
Job onto GetJob / JobItem / JobSpec / Pods / StatusHistory / RestartRecord as its `from_map` reads them.

Plain functions rather than DRF serializers: the shapes are fixed by the SDK (docs/api-map.md §7),
and building dicts directly keeps GetJob and ListJobs to a handful of queries.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.db.models import Prefetch
from django.utils import timezone

from agent import images
from apikit import params
from apikit.errors import invalid, invalid_fields
from datasets.services import JobCodeSource, JobDataSource
from jobs import aimaster, elastic
from jobs.models import Accessibility, Job, JobSpec, OversoldType, Pod, RestartRecord, Source
from jobs.services import CustomEnv, JobRequest, PodResources, RoleRequest
from jobs.states import JobStatus
from market.bids import as_decimal
from quotas.models import Quota, ResourceSpec, ResourceType

# --- CreateJob: the SDK's body onto jobs.services.JobRequest -------------------------------------

VPC_KEYS = ("VpcId", "SwitchId", "SecurityGroupId", "DefaultRoute", "ExtendedCIDRs")
LEAF, ANY_KEYS = params.LEAF, params.ANY_KEYS
ELASTIC_KEYS = ("AIMasterDockerImage", "AIMasterType", "EDPMaxParallelism", "EDPMinParallelism", "ElasticStrategy",
                "EnableAIMaster", "EnableEDP", "EnableElasticTraining", "EnablePsJobElasticPS",
                "EnablePsJobElasticWorker", "EnablePsResourceEstimate", "MaxParallelism", "MinParallelism",
                "PSMaxParallelism", "PSMinParallelism",
                "ResizeInPlace")  # OpenDLC's own: workers re-form their group instead of restarting
# Every key CreateJob reads (apikit.params.unsupported's shape); any other key that asks for
# something is refused by name, so nothing is accepted and ignored. tests/api/test_sdk_fields.py
# walks the SDK's CreateJobRequest against it.
CREATE_JOB_SHAPE = {
    **dict.fromkeys(("DisplayName", "UserCommand", "JobType", "WorkspaceId", "Priority", "ResourceId",
                     "JobMaxRunningTimeMinutes", "Description", "Accessibility"), LEAF),
    "Envs": ANY_KEYS,
    "CustomEnvs": [dict.fromkeys(("Key", "Value", "Visible"), LEAF)],
    "UserVpc": dict.fromkeys(VPC_KEYS, LEAF),
    "ElasticSpec": dict.fromkeys(ELASTIC_KEYS, LEAF),
    "DataSources": ANY_KEYS, "CodeSource": ANY_KEYS,  # datasets and code sources read them
    "Settings": {**dict.fromkeys(("OversoldType", "EnableErrorMonitoringInAIMaster", "ErrorMonitoringArgs",
                                  "TerminationGracePeriodSeconds"), LEAF), "Tags": ANY_KEYS},
    "JobSpecs": [{
        **dict.fromkeys(("Type", "PodCount", "EcsSpec", "Image", "UserCommand", "OversoldType", "UseSpotInstance"),
                        LEAF),
        "SpotSpec": dict.fromkeys(("SpotStrategy", "SpotDiscountLimit", "SpotPriceLimit"), LEAF),
        "ImageConfig": dict.fromkeys(images.CONFIG_KEYS, LEAF),
        "ResourceConfig": dict.fromkeys(("GPU", "CPU", "Memory", "GPUType", "SharedMemory"), LEAF),
    }],
}
NOT_SUPPORTED = "is not supported by this platform; leave it out"


def refuse_unsupported(body: dict, shape: dict) -> None:
    """InvalidParameter naming every key of the body that asks for something the action does not do."""
    if paths := params.unsupported(body, shape):
        raise invalid_fields(dict.fromkeys(paths, NOT_SUPPORTED))


def job_request(body: dict, client_token: str = "") -> JobRequest:
    """A JobRequest from a CreateJob body; `[]`, `{}` and `""` from a from_map request count as not given.

    Where the job runs follows from what is given, as on PAI: a ResourceId (quota) makes a quota
    job, a SpotSpec on the roles a spot job, neither a pay-as-you-go job on public resources.
    """
    refuse_unsupported(body, CREATE_JOB_SHAPE)
    specs = _job_specs(body.get("JobSpecs"))
    settings = _object(body, "Settings")
    quota_id = _text(body, "ResourceId")
    spot = any(params.given(s.get("SpotSpec")) for s in specs)
    source = Source.QUOTA if quota_id else (Source.SPOT if spot else Source.PUBLIC)
    return JobRequest(
        display_name=body.get("DisplayName") or "",
        user_command=body.get("UserCommand") or "",
        roles=[_role(i, s) for i, s in enumerate(specs)],
        job_type=body.get("JobType") or "PyTorchJob",
        workspace_id=_workspace_id(body.get("WorkspaceId")),
        envs=_envs(body.get("Envs")),
        priority=body["Priority"] if params.given(body.get("Priority")) else 1,
        resource_type=_resource_type(quota_id, specs),
        source=source,
        quota_id=quota_id,
        oversold_type=_oversold_type(settings, specs),
        user_vpc=_user_vpc(body.get("UserVpc")),
        ft_enabled=bool(settings.get("EnableErrorMonitoringInAIMaster")),
        ft_other_config=settings.get("ErrorMonitoringArgs") or "",
        **_fault_tolerance(settings.get("ErrorMonitoringArgs") or ""),
        max_running_time_minutes=(
            body["JobMaxRunningTimeMinutes"] if params.given(body.get("JobMaxRunningTimeMinutes")) else None
        ),
        termination_grace_s=(
            settings["TerminationGracePeriodSeconds"]
            if params.given(settings.get("TerminationGracePeriodSeconds")) else 30
        ),
        data_sources=_data_sources(body.get("DataSources")),
        code_source=_code_source(body.get("CodeSource")),
        description=body.get("Description") or "",
        accessibility=body.get("Accessibility") or Accessibility.PUBLIC,
        custom_envs=_custom_envs(body.get("CustomEnvs")),
        tags=_tags(settings.get("Tags"), source),
        elastic_spec=_object(body, "ElasticSpec"),
        client_token=client_token,
    )


def _fault_tolerance(args: str) -> dict:
    """AIMaster's configuration from ErrorMonitoringArgs, PAI's defaults where a flag is not given."""
    try:
        return aimaster.job_fields(aimaster.resolve(args, aimaster.PAI_DEFAULTS))
    except aimaster.OtherConfigError as e:
        raise invalid("Settings.ErrorMonitoringArgs", str(e)) from None


def _object(body: dict, name: str) -> dict:
    value = body.get(name)
    if not params.given(value):
        return {}
    if not isinstance(value, dict):
        raise invalid(name, f"must be an object, got {value!r}")
    return value


def _text(body: dict, name: str) -> str | None:
    value = body.get(name)
    return str(value).strip() or None if params.given(value) else None


def _job_specs(value) -> list[dict]:
    if not params.given(value):
        return []
    if not isinstance(value, list):
        raise invalid("JobSpecs", "must be a list of job specs ({Type, PodCount, EcsSpec, Image, ...})")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise invalid(f"JobSpecs[{i}]", f"must be an object, got {item!r}")
    return value


def _role(i: int, spec: dict) -> RoleRequest:
    spot = spec.get("SpotSpec") if params.given(spec.get("SpotSpec")) else {}
    if not isinstance(spot, dict):
        raise invalid(f"JobSpecs[{i}].SpotSpec", f"must be an object, got {spot!r}")
    if spec.get("UseSpotInstance") not in (None, bool(spot)):
        # GetJob says whether a role bids; sent back it must agree with the role's SpotSpec.
        raise invalid(f"JobSpecs[{i}].UseSpotInstance", f"is {spec['UseSpotInstance']!r} but the role "
                                                        f"{'has' if spot else 'has no'} SpotSpec; a SpotSpec makes a "
                                                        "role bid on preemptible resources")
    if spec.get("EcsSpec") and params.given(spec.get("ResourceConfig")):
        _instance_type_echo(i, spec["EcsSpec"], spec["ResourceConfig"])
    return RoleRequest(
        role=spec.get("Type") or "Worker",
        pod_count=spec["PodCount"] if params.given(spec.get("PodCount")) else 1,
        instance_type=spec.get("EcsSpec") or "",
        # GetJob returns both for a role of an instance type: sent back, its EcsSpec wins, as before.
        resources=None if spec.get("EcsSpec") else _resource_config(i, spec.get("ResourceConfig")),
        image=spec.get("Image") or "",
        image_config=spec["ImageConfig"] if params.given(spec.get("ImageConfig")) else {},
        command=spec.get("UserCommand") or "",
        spot_strategy=spot.get("SpotStrategy") or "",
        spot_discount_limit=_number(spot.get("SpotDiscountLimit")),
        spot_price_limit=_number(spot.get("SpotPriceLimit")),
    )


def _instance_type_echo(i: int, instance_type: str, config) -> None:
    """GetJob gives a role of an instance type that type's resources as its ResourceConfig, so a
    request sent back carries both: accepted when the ResourceConfig is that echo, since the
    EcsSpec decides; refused when it asks for other resources, which the role would not get."""
    spec = ResourceSpec.objects.filter(instance_type=instance_type).first()
    if spec is None or not isinstance(config, dict):
        return  # the validator names the unknown type; _resource_config a bad ResourceConfig
    echo = {"GPU": str(spec.gpu), "CPU": str(spec.cpu), "Memory": params.memory_amount(spec.memory_mib),
            "GPUType": spec.gpu_type}
    differ = sorted(k for k, v in config.items() if params.given(v) and str(v) != echo.get(k))
    if differ:
        raise invalid(f"JobSpecs[{i}].ResourceConfig", f"{', '.join(differ)} differ from {instance_type}'s "
                                                       f"({', '.join(f'{k} {echo[k]}' for k in differ if k in echo)}): "
                                                       "give an EcsSpec or a ResourceConfig, not both")


def _resource_config(i: int, value) -> PodResources | None:
    """ResourceConfig {GPU, CPU, Memory} as PodResources; amounts that are not whole numbers are
    passed on for the validator to name. GPUType and SharedMemory are refused: custom pods go to
    any node of the quota with room (an EcsSpec pins a type), and the executors set no /dev/shm."""
    if not params.given(value):
        return None
    at = f"JobSpecs[{i}].ResourceConfig"
    if not isinstance(value, dict):
        raise invalid(at, f"must be an object {{GPU, CPU, Memory}}, got {value!r}")
    for key in ("GPUType", "SharedMemory"):
        if params.given(value.get(key)):
            raise invalid(f"{at}.{key}", "is not supported: a pod with its own resources runs on any node of the "
                                         "quota with room; give an EcsSpec instead to choose the node type")
    unknown = sorted(set(value) - {"GPU", "CPU", "Memory", "GPUType", "SharedMemory"})
    if unknown:
        raise invalid(at, f"unknown keys {unknown}; allowed: GPU, CPU, Memory")
    return PodResources(gpu=_whole(value.get("GPU"), 0), cpu=_whole(value.get("CPU"), 1),
                        memory_mib=params.memory_mib(f"{at}.Memory", value.get("Memory")))


def _whole(value, default: int):
    if not params.given(value):
        return default
    number = params.whole_number(value)
    return number if number is not None else value


def _number(value: Any):
    """A Decimal for a number (0.4 stays 0.4); anything else is passed on for the validator to name."""
    if value is None:
        return None
    number = as_decimal(value)
    return number if number is not None else value


def _workspace_id(value) -> int | str | None:
    if not params.given(value):
        return None
    return params.ident(value) or str(value)


def _envs(value) -> dict:
    if not params.given(value):
        return {}
    if not isinstance(value, dict):
        raise invalid("Envs", f"must be an object of variable names to string values, got {value!r}")
    return value


DATA_SOURCE_KEYS = {"DataSourceId": "data_source_id", "MountPath": "mount_path", "Uri": "uri", "Options": "options"}
CODE_SOURCE_KEYS = {"CodeSourceId": "code_source_id", "Branch": "branch", "Commit": "commit", "MountPath": "mount_path"}


def _data_sources(value) -> list[JobDataSource]:
    """DataSources [{DataSourceId, MountPath, Uri, Options}]; other keys the SDK knows (a version, a
    cache, an access point, a RAM role) are refused rather than dropped."""
    if not params.given(value):
        return []
    if not isinstance(value, list):
        raise invalid("DataSources", "must be a list of {DataSourceId, MountPath}")
    return [JobDataSource(**_known(f"DataSources[{i}]", item, DATA_SOURCE_KEYS)) for i, item in enumerate(value)]


def _code_source(value) -> JobCodeSource | None:
    if not params.given(value):
        return None
    if params.given(value.get("IsSharedMountPath") if isinstance(value, dict) else None):
        if value["IsSharedMountPath"] not in (False, "false", "False"):
            raise invalid("CodeSource.IsSharedMountPath", "is not supported: each pod gets its own clone")
        value = {k: v for k, v in value.items() if k != "IsSharedMountPath"}
    return JobCodeSource(**_known("CodeSource", value, CODE_SOURCE_KEYS))


def _known(at: str, item, keys: dict[str, str]) -> dict:
    if not isinstance(item, dict):
        raise invalid(at, f"must be an object with {', '.join(keys)}, got {item!r}")
    unsupported = sorted(k for k, v in item.items() if k not in keys and params.given(v))
    if unsupported:
        raise invalid(f"{at}.{unsupported[0]}", f"is not supported; a source takes {', '.join(keys)}")
    out = {}
    for key, name in keys.items():
        v = item.get(key)
        if params.given(v) and not isinstance(v, str):
            raise invalid(f"{at}.{key}", f"must be a string, got {v!r}")
        out[name] = v.strip() if params.given(v) else ""
    return out


def _custom_envs(value) -> list[CustomEnv]:
    if not params.given(value):
        return []
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise invalid("CustomEnvs", "must be a list of {Key, Value, Visible}")
    return [CustomEnv(key=e.get("Key"), value=e.get("Value"), visible=_visible(i, e.get("Visible")))
            for i, e in enumerate(value)]


def _visible(i: int, value) -> bool:
    """The SDK types Visible as text: true and false, in any case, or a JSON boolean; absent is true."""
    if value is None or isinstance(value, bool):
        return value is not False
    if str(value).strip().lower() in ("true", "false"):
        return str(value).strip().lower() == "true"
    raise invalid(f"CustomEnvs[{i}].Visible", f"must be true or false, got {value!r}")


def _tags(value, source: str) -> dict:
    """The user's tags of Settings.Tags. GetJob adds the platform's payment tag, which a request sent
    back carries: accepted when it says what the job's source makes it, refused otherwise."""
    if not params.given(value):
        return {}
    if not isinstance(value, dict):
        raise invalid("Settings.Tags", f"must be an object of tag keys to values, got {value!r}")
    tags = dict(value)
    if PAY_TAG in tags:
        expected = Job(source=source).payment_type
        if tags.pop(PAY_TAG) != expected:
            raise invalid(f"Settings.Tags.{PAY_TAG}", f"is the platform's, set from where the job runs: "
                                                      f"{expected} for this request")
    return tags


PAY_TAG = "acs:pai:dlc:payType"


def _resource_type(quota_id: str | None, specs: list[dict]) -> str:
    """Lingjun or ECS: the quota's type, else the first known instance type's, else ECS."""
    if quota_id:
        quota = Quota.objects.filter(quota_id=quota_id).only("resource_type").first()
        if quota:
            return quota.resource_type
    types = [s.get("EcsSpec") for s in specs if s.get("EcsSpec")]
    spec = ResourceSpec.objects.filter(instance_type__in=types).only("resource_type").first()
    return spec.resource_type if spec else ResourceType.ECS


def _oversold_type(settings: dict, specs: list[dict]) -> str | None:
    value = settings.get("OversoldType") or next((s["OversoldType"] for s in specs if s.get("OversoldType")), None)
    return value or None


def _user_vpc(value) -> dict:
    if not params.given(value):
        return {}
    if not isinstance(value, dict):
        raise invalid("UserVpc", f"must be an object with VpcId, SwitchId, SecurityGroupId, got {value!r}")
    return {k: value[k] for k in VPC_KEYS if params.given(value.get(k))}


# The services name fields in their own words; the SDK user knows the request's.
FIELD_NAMES = {
    "display_name": "DisplayName", "user_command": "UserCommand", "job_type": "JobType",
    "priority": "Priority", "resource_type": "JobSpecs[0].EcsSpec", "source": "ResourceId",
    "workspace_id": "WorkspaceId", "quota_id": "ResourceId", "oversold_type": "Settings.OversoldType",
    "roles": "JobSpecs", "envs": "Envs", "user_vpc": "UserVpc",
    "max_running_time_minutes": "JobMaxRunningTimeMinutes",
    "termination_grace_s": "Settings.TerminationGracePeriodSeconds",
    "ft_enabled": "Settings.EnableErrorMonitoringInAIMaster", "ft_other_config": "Settings.ErrorMonitoringArgs",
    "status": "Status", "description": "Description", "accessibility": "Accessibility",
    "custom_envs": "CustomEnvs", "tags": "Settings.Tags", "elastic_spec": "ElasticSpec",
    "client_token": "x-acs-client-token",
    "elastic_spec.EnableElasticTraining": "ElasticSpec.EnableElasticTraining",
    "elastic_spec.MinParallelism": "ElasticSpec.MinParallelism",
    "elastic_spec.MaxParallelism": "ElasticSpec.MaxParallelism",
    "elastic_spec.ResizeInPlace": "ElasticSpec.ResizeInPlace",
}
ROLE_FIELD_NAMES = {
    "role": "Type", "pod_count": "PodCount", "instance_type": "EcsSpec", "image": "Image", "image_config": "ImageConfig",
    "command": "UserCommand", "spot_strategy": "SpotSpec.SpotStrategy",
    "spot_discount_limit": "SpotSpec.SpotDiscountLimit", "spot_price_limit": "SpotSpec.SpotPriceLimit",
    "spot_duration_hours": "SpotSpec", "resource_config": "ResourceConfig", "resource_config.gpu": "ResourceConfig.GPU",
    "resource_config.cpu": "ResourceConfig.CPU", "resource_config.memory_mib": "ResourceConfig.Memory",
}
_ROLE_FIELD = re.compile(r"^roles\[(\d+)\]\.(\w+(?:\.\w+)?)$")
_SOURCE_FIELD = re.compile(r"^(data_sources|code_source)(?:\[(\d+)\])?\.(\w+)$")


def api_field(name: str) -> str:
    """`roles[0].spot_discount_limit` -> `JobSpecs[0].SpotSpec.SpotDiscountLimit`."""
    if m := _ROLE_FIELD.match(name):
        return f"JobSpecs[{m[1]}].{ROLE_FIELD_NAMES.get(m[2], m[2])}"
    if name.startswith("user_vpc."):
        return "UserVpc." + name.split(".", 1)[1]
    if m := _SOURCE_FIELD.match(name):
        index = f"[{m[2]}]" if m[2] else ""
        keys = DATA_SOURCE_KEYS if m[1] == "data_sources" else CODE_SOURCE_KEYS
        key = next((k for k, v in keys.items() if v == m[3]), m[3])
        return f"{'DataSources' if m[1] == 'data_sources' else 'CodeSource'}{index}.{key}"
    if name.startswith("ft_"):
        return "Settings.ErrorMonitoringArgs" if name not in FIELD_NAMES else FIELD_NAMES[name]
    return FIELD_NAMES.get(name, name)


# --- responses ------------------------------------------------------------------------------------

def job_spec(spec: JobSpec, job: Job) -> dict:
    shape = spec.shape
    out = {
        "Type": spec.role,
        "Image": spec.image,
        "PodCount": spec.pod_count,
        "EcsSpec": shape.instance_type or None,
        "ResourceConfig": {"CPU": str(shape.cpu), "Memory": params.memory_amount(shape.memory_mib),
                           "GPU": str(shape.gpu), "GPUType": spec.spec.gpu_type if spec.spec_id else ""},
        "UseSpotInstance": bool(spec.spot_strategy),
        "OversoldType": job.oversold_type if job.source == Source.QUOTA else None,
        "UserCommand": spec.command or None,
    }
    if spec.image_config:  # the registry and the user, never the password
        out["ImageConfig"] = {k: spec.image_config[k] for k in ("DockerRegistry", "Username")
                              if spec.image_config.get(k)}
    if spec.spot_strategy:
        out["SpotSpec"] = {"SpotStrategy": spec.spot_strategy}
        if spec.spot_discount_limit is not None:
            out["SpotSpec"]["SpotDiscountLimit"] = float(spec.spot_discount_limit)
        if spec.spot_price_limit is not None:
            out["SpotSpec"]["SpotPriceLimit"] = float(spec.spot_price_limit)
    return out


def pod_uid(pod: Pod) -> str:
    """The SDK's PodUid: one per incarnation, while its PodId (Pod.name) stays across restarts."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"opendlc:pod:{pod.pk}"))


def pod_shape(pod: Pod, history: list[Pod] = ()) -> dict:
    out = {
        "PodId": pod.name,
        "PodUid": pod_uid(pod),
        "Type": pod.role.lower(),
        "Status": pod.status,
        "SubStatus": pod.sub_status,
        "NodeName": pod.node.name if pod.node_id else None,
        "Ip": (pod.node.hostname or None) if pod.node_id else None,
        "GmtCreateTime": params.fmt_time(pod.created_at),
        "GmtStartTime": params.fmt_time(pod.started_at),
        "GmtFinishTime": params.fmt_time(pod.finished_at),
    }
    if pod.started_at:
        out["Duration"] = int(((pod.finished_at or timezone.now()) - pod.started_at).total_seconds())
    if history:
        out["HistoryPods"] = [pod_shape(h) for h in history]
    return out


def pods_of(job: Job) -> list[dict]:
    """Current pods, each with its earlier incarnations as HistoryPods (Evicted ones included)."""
    pods = job.shape_pods
    earlier: dict[tuple, list[Pod]] = {}
    for p in pods:
        if not p.current:
            earlier.setdefault((p.role, p.index), []).append(p)
    return [pod_shape(p, earlier.get((p.role, p.index), [])) for p in pods if p.current]


def status_history(job: Job) -> list[dict]:
    rows = list(job.status_history.all())
    return [
        {"Status": row.status, "StartTime": params.fmt_time(row.at),
         "EndTime": params.fmt_time(rows[i + 1].at) if i + 1 < len(rows) else None,
         "ReasonCode": row.reason, "ReasonMessage": row.message}
        for i, row in enumerate(rows)
    ]


RESTART_REASONS = {
    RestartRecord.Cause.PREEMPTION: "Resource Preempted",
    RestartRecord.Cause.SPOT_RELEASE: "SpotReleased",
    RestartRecord.Cause.NODE_LOST: "NodeLost",
    RestartRecord.Cause.HANG: "Hang",
    RestartRecord.Cause.FAILURE: "Failure",
}


def restart_records(job: Job) -> list[dict]:
    out, counted = [], 0
    for record in job.restarts.all():
        counted += record.counted
        out.append({
            "JobRestartCount": counted,
            "OccurTime": params.fmt_time(record.at),
            "OccurPhase": JobStatus.RUNNING.value,
            "Reason": RESTART_REASONS.get(record.cause, record.cause),
            "RestartStatus": "Succeeded" if record.running_again_at else "Restarting",
            "RestartLevelType": "Job",
            "RestartDurationInSec": int(record.duration_s) if record.duration_s is not None else None,
            "RestartFailReason": "",
            "DetailErrorInfoList": [{"ErrorMsg": record.message}] if record.message else [],
        })
    return out


def _requested(job: Job) -> tuple[int, int, int]:
    """CPU cores, memory GiB and GPUs the job asks for, over all its roles."""
    cpu = mem = gpu = 0
    for spec in job.shape_specs:
        shape = spec.shape
        cpu += shape.cpu * spec.pod_count
        mem += shape.memory_mib * spec.pod_count
        gpu += shape.gpu * spec.pod_count
    return cpu, mem // 1024, gpu


def _duration(job: Job) -> int | None:
    if not job.running_at:
        return None
    return int(((job.finished_at or timezone.now()) - job.running_at).total_seconds())


def _settings(job: Job) -> dict:
    return {
        "OversoldType": job.oversold_type if job.source == Source.QUOTA else None,
        "EnableErrorMonitoringInAIMaster": job.ft_enabled,
        "ErrorMonitoringArgs": aimaster.error_monitoring_args(job) if job.ft_enabled else job.ft_other_config or None,
        "TerminationGracePeriodSeconds": job.termination_grace_s,
        "Tags": {**job.tags, PAY_TAG: job.payment_type},
    }


def custom_envs_out(job: Job) -> list[dict]:
    """CustomEnvs as GetJob shows them (the SDK types Visible as text)."""
    return [{**e, "Visible": "true" if e["Visible"] else "false"} for e in job.shown_custom_envs]


def _user_vpc_out(job: Job) -> dict | None:
    vpc = job.user_vpc or {}
    if not vpc:
        return None
    out = {k: vpc.get(k) for k in ("VpcId", "SwitchId", "SecurityGroupId", "DefaultRoute")}
    out["ExtendedCidrs"] = vpc.get("ExtendedCIDRs") or []
    return out


def _final_times(job: Job) -> dict:
    at = params.fmt_time(job.finished_at)
    return {
        "GmtFinishTime": at,
        "GmtSuccessedTime": at if job.status == JobStatus.SUCCEEDED else None,
        "GmtFailedTime": at if job.status == JobStatus.FAILED else None,
        "GmtStoppedTime": at if job.status == JobStatus.STOPPED else None,
    }


WAITING_REASON = "WaitingForResources"


def _reason(job: Job) -> dict:
    """A waiting job's reason is the scheduler's (the console shows the same); else the last step's."""
    if waiting := job.wait_explanation:
        return {"ReasonCode": WAITING_REASON, "ReasonMessage": waiting}
    return {"ReasonCode": job.reason_code, "ReasonMessage": job.reason_message}


def _core(job: Job) -> dict:
    """The keys GetJob and JobItem share."""
    return {
        "JobId": job.job_id,
        "DisplayName": job.display_name,
        "JobType": job.job_type,
        "WorkspaceId": str(job.workspace_id),
        "WorkspaceName": job.workspace.name,
        "ResourceId": job.quota.quota_id if job.quota_id else "",
        "ResourceType": job.resource_type,
        "Status": job.status,
        "SubStatus": job.sub_status,
        **_reason(job),
        "Priority": job.priority,
        "UserId": str(job.user_id),
        "TenantId": str(job.workspace.tenant_id),
        "UserCommand": job.user_command,
        "Envs": job.envs,
        "CustomEnvs": custom_envs_out(job),
        "Description": job.description,
        "ElasticSpec": job.elastic_spec or None,
        "ElasticWorkers": _elastic_workers(job),
        "Duration": _duration(job),
        "RestartTimes": str(job.restart_count),
        "GmtCreateTime": params.fmt_time(job.created_at),
        "GmtSubmittedTime": params.fmt_time(job.submitted_at),
        "GmtRunningTime": params.fmt_time(job.running_at),
        **_final_times(job),
        "JobSpecs": [job_spec(s, job) for s in job.shape_specs],
        "Settings": _settings(job),
        "UserVpc": _user_vpc_out(job),
        "UseOversoldResource": job.use_oversold_resource,
        "Accessibility": job.accessibility,
        "ThirdpartyLibs": [],
        **sources_out(job),
    }


def sources_out(job: Job) -> dict:
    """DataSources and CodeSource as the job was submitted with them."""
    code = job.code_source
    return {
        "DataSources": [{"DataSourceId": d["data_source_id"], "MountPath": d["mount_path"], "Uri": d["uri"]}
                        for d in job.data_sources or []],
        "CodeSource": {"CodeSourceId": code["code_source_id"], "Branch": code["branch"] or None,
                       "Commit": code["commit"] or None, "MountPath": code["mount_path"]} if code else None,
    }


def with_shape_data(jobs, *, detail: bool):
    """`jobs` with what job_item (detail False) or job_detail (True) reads, a query per relation. The
    specs and pods come as lists (shape_specs, shape_pods): otherwise Django's prefetch builds a
    queryset per job and relation to hold them, which costs a page more than the rows do."""
    pods = Pod.objects.select_related("node") if detail else Pod.objects.filter(current=True).select_related("node")
    # The specs with their resource spec in one query, not a prefetch level each.
    specs = JobSpec.objects.select_related("spec")
    jobs = jobs.select_related("workspace", "quota", "user").prefetch_related(
        Prefetch("specs", queryset=specs, to_attr="shape_specs"), Prefetch("pods", queryset=pods, to_attr="shape_pods"))
    return jobs.prefetch_related("status_history", "restarts") if detail else jobs


def job_detail(job: Job) -> dict:
    """GetJob's body (without RequestId), of a job read through with_shape_data(detail=True)."""
    cpu, mem, gpu = _requested(job)
    return {
        **_core(job),
        "RequestCPU": cpu,
        "RequestMemory": float(mem),
        "RequestGPU": float(gpu),
        "Pods": pods_of(job),
        "StatusHistory": status_history(job),
        "RestartRecord": restart_records(job),
        "ElasticResizes": [{"Time": params.fmt_time(e.at), "Message": e.message} for e in elastic.resizes(job)]
        if job.elastic_range else None,
    }


def _elastic_workers(job: Job) -> dict | None:
    """OpenDLC's own key beside PAI's ElasticSpec: an elastic job's workers now and its range."""
    found = elastic.summary(job, job.shape_pods)
    if found is None:
        return None
    return {"Current": found["current"], "MinParallelism": found["min"], "MaxParallelism": found["max"]}


def job_item(job: Job) -> dict:
    """One of ListJobs' Jobs (JobItem), of a job read through with_shape_data."""
    cpu, mem, gpu = _requested(job)
    return {
        **_core(job),
        "RequestCPU": cpu,
        "RequestMemory": f"{mem}Gi",
        "RequestGPU": str(gpu),
        "NodeCount": str(sum(s.pod_count for s in job.shape_specs)),
        "JobMaxRunningTimeMinutes": job.max_running_time_minutes,
        "ResourceQuotaName": job.quota.name if job.quota_id else None,
        "ResourceName": job.quota.name if job.quota_id else None,
        "Username": job.user.username,
        "EnablePreemptibleJob": job.source == Source.SPOT,
        "GmtModifiedTime": params.fmt_time(job.modified_at),
        "Pods": [_pod_item(p) for p in job.shape_pods if p.current],
    }


def _pod_item(pod: Pod) -> dict:
    shape = pod_shape(pod)
    shape["PodIp"] = shape.pop("Ip")
    shape.pop("Duration", None)
    return shape


def oversold_filter(value: str) -> dict:
    """ListJobs' OversoldInfo as Job filters (idle resources are a quota job's choice)."""
    return {"source": Source.QUOTA} | {
        "ForbiddenQuotaOverSold": {"oversold_type": OversoldType.FORBIDDEN},
        "ForceQuotaOverSold": {"oversold_type": OversoldType.FORCE},
        "AcceptQuotaOverSold-true": {"oversold_type": OversoldType.ACCEPT, "use_oversold_resource": True},
        "AcceptQuotaOverSold-false": {"oversold_type": OversoldType.ACCEPT, "use_oversold_resource": False},
    }[value]


PAYMENT_TYPES = {"PrePaid": Source.QUOTA, "Spot": Source.SPOT, "PostPaid": Source.PUBLIC}
