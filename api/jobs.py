"""DLC 2020-12-03 job actions: CreateJob, GetJob, ListJobs, StopJob, DeleteJob, UpdateJob,
GetJobEvents, GetPodLogs, GetPodEvents (methods, paths and keys as docs/api-map.md lists them).

Thin views: parse the SDK's request, call jobs.services, shape the answer with api.job_shapes.
A caller sees only jobs of workspaces it belongs to; any other job id answers 404 exactly like a
job that does not exist, so ids of other teams' jobs cannot be probed.
"""

from __future__ import annotations

import json
from datetime import timedelta

from django.core.exceptions import PermissionDenied
from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from api import job_shapes as shapes
from apikit import params
from apikit.errors import ApiError, forbidden, invalid, invalid_fields, not_found
from apikit.pagination import page_of, paginate
from apikit.schema import PAGING, sdk_action
from apikit.views import SdkView
from jobs import services
from jobs.logs import read_logs
from jobs.models import Accessibility, Job, Pod

# CreateJob's idempotency key (PAI's CreateJobRequest has no ClientToken): an x-acs-* header, so the
# signature must cover it. A retry with the same one answers the same JobId.
CLIENT_TOKEN_HEADER = "x-acs-client-token"
LIST_WINDOW = timedelta(days=7)  # ListJobs without StartTime/EndTime: jobs created in the last 7 days
MAX_EVENTS = 2000
MAX_LOG_LINES = 2000
LOG_BYTES = 4 * 1024 * 1024
JOB_SORT = {"GmtCreateTime": "created_at", "GmtFinishTime": "finished_at", "DisplayName": "display_name",
            "JobType": "job_type", "Status": "status"}


def get_visible_job(user, job_id: str, *, detail: bool = False) -> Job:
    job = shapes.with_shape_data(services.visible_jobs(user), detail=detail).filter(job_id=job_id).first()
    if job is None:
        raise not_found("Job", job_id)
    return job


def _refused(exc: services.ValidationFailed) -> ApiError:
    errors = {shapes.api_field(k): v for k, v in exc.errors.items()}
    if list(errors) == ["Status"]:
        return ApiError("IncorrectStatus.Job", errors["Status"])
    return invalid_fields(errors)


def _call(fn, *args):
    """Run a service function; its refusals become the SDK's 400 / 403."""
    try:
        return fn(*args)
    except services.ValidationFailed as exc:
        raise _refused(exc) from None
    except PermissionDenied as exc:
        raise forbidden(str(exc)) from None


class JobsView(SdkView):
    """POST /api/v1/jobs (CreateJob), GET /api/v1/jobs (ListJobs)."""

    @sdk_action("CreateJob", "Submit a job (WorkspaceId optional: the caller's default workspace)", body=True)
    def post(self, request):
        token = request.headers.get(CLIENT_TOKEN_HEADER, "")
        job = _call(services.create_job, request.user, shapes.job_request(self.body(request), client_token=token))
        return self.reply(request, {"JobId": job.job_id})

    @sdk_action("ListJobs", "Jobs of the caller's workspaces; without StartTime/EndTime the last 7 days", query=(
        *PAGING, "Status", "DisplayName", "DisplayNameSearchMode", "ResourceId", "ResourceIds", "WorkspaceId",
        "OversoldInfo", "PaymentType", "JobId", "JobIds", "JobType", "Username", "ResourceQuotaName", "ShowOwn",
        "UserIdForFilter", "StartTime", "EndTime", "TimeRangeField", "Tags", "Accessibility"))
    def get(self, request):
        q = request.query_params
        jobs = _filtered_jobs(request.user, q)
        field = JOB_SORT[params.choice(q, "SortBy", JOB_SORT, default="GmtCreateTime")]
        prefix = "-" if params.order(q) == "desc" else ""
        jobs = jobs.order_by(f"{prefix}{field}", f"{prefix}pk")
        rows, total = paginate(shapes.with_shape_data(jobs, detail=False), page_of(q, max_size=100))
        return self.reply(request, {"Jobs": [shapes.job_item(job) for job in rows], "TotalCount": total})


def _filtered_jobs(user, q):
    jobs = services.visible_jobs(user)
    jobs = _time_window(jobs, q)
    exact = {"JobId": "job_id", "JobType": "job_type", "ResourceId": "quota__quota_id"}
    for name, field in exact.items():
        if value := params.text(q, name):
            jobs = jobs.filter(**{field: value})
    for name, field in {"JobIds": "job_id", "ResourceIds": "quota__quota_id", "Status": "status"}.items():
        if values := params.listed(q, name):
            jobs = jobs.filter(**{f"{field}__in": values})
    if workspace := params.text(q, "WorkspaceId"):
        jobs = jobs.filter(workspace_id=params.ident(workspace))
    if name := params.text(q, "DisplayName"):
        exact_name = (params.text(q, "DisplayNameSearchMode") or "").lower() in ("exact", "exactmatch")
        jobs = jobs.filter(display_name=name) if exact_name else jobs.filter(display_name__icontains=name)
    if oversold := params.choice(q, "OversoldInfo", ("ForbiddenQuotaOverSold", "ForceQuotaOverSold",
                                                    "AcceptQuotaOverSold-true", "AcceptQuotaOverSold-false")):
        jobs = jobs.filter(**shapes.oversold_filter(oversold))
    if payment := params.choice(q, "PaymentType", shapes.PAYMENT_TYPES):
        jobs = jobs.filter(source=shapes.PAYMENT_TYPES[payment])
    if username := params.text(q, "Username"):
        jobs = jobs.filter(user__username__icontains=username)
    if quota_name := params.text(q, "ResourceQuotaName"):
        jobs = jobs.filter(quota__name__icontains=quota_name)
    if params.boolean(q, "ShowOwn", default=False):
        jobs = jobs.filter(user=user)
    if (owner := params.text(q, "UserIdForFilter")) is not None:
        jobs = jobs.filter(user_id=params.ident(owner))
    if accessibility := params.choice(q, "Accessibility", Accessibility.values):
        jobs = jobs.filter(accessibility=accessibility)
    return _tagged(jobs, q)


def _tagged(jobs, q):
    """ListJobs' Tags, which the SDK sends as a JSON object: jobs that carry every one of its tags."""
    if not (raw := params.text(q, "Tags")):
        return jobs
    try:
        tags = json.loads(raw)
    except ValueError:
        tags = None
    if not isinstance(tags, dict):
        raise invalid("Tags", f'must be a JSON object of tag keys to values, such as {{"team": "nlp"}}, got {raw!r}')
    for i, (key, value) in enumerate(tags.items()):
        jobs = jobs.alias(**{f"_tag{i}": KeyTransform(str(key), "tags")}).filter(**{f"_tag{i}": str(value)})
    return jobs


def _time_window(jobs, q):
    field = params.choice(q, "TimeRangeField", ("GmtCreateTime", "GmtFinishTime", "GmtRunningTime"),
                          default="GmtCreateTime")
    column = {"GmtCreateTime": "created_at", "GmtFinishTime": "finished_at", "GmtRunningTime": "running_at"}[field]
    end = params.timestamp(q, "EndTime") or timezone.now()
    start = params.timestamp(q, "StartTime") or timezone.now() - LIST_WINDOW
    if start > end:
        raise invalid("StartTime", f"must not be after EndTime ({params.fmt_time(end)})")
    return jobs.filter(**{f"{column}__gte": start, f"{column}__lte": end})


class JobView(SdkView):
    """GET (GetJob), PUT (UpdateJob), DELETE (DeleteJob) /api/v1/jobs/{JobId}."""

    @sdk_action("GetJob", "One job with its specs, pods (and earlier incarnations), history and restarts",
                query=("NeedDetail",))
    def get(self, request, job_id):
        params.boolean(request.query_params, "NeedDetail")  # everything is always included; still checked
        job = get_visible_job(request.user, job_id, detail=True)
        return self.reply(request, shapes.job_detail(job))

    @sdk_action("UpdateJob", "Change a job's Priority", body=True)
    def put(self, request, job_id):
        job = get_visible_job(request.user, job_id)
        body = self.body(request)
        fixed = {f: "cannot be changed after the job was created; UpdateJob changes Priority"
                 for f in ("JobSpecs", "UserCommand", "Description", "Accessibility") if params.given(body.get(f))}
        if fixed:
            raise invalid_fields(fixed)
        if not params.given(body.get("Priority")):
            raise invalid("Priority", "is required: the new priority, an integer from 1 to 9")
        _call(services.update_job_priority, request.user, job, body["Priority"])
        return self.reply(request, {"JobId": job.job_id})

    @sdk_action("DeleteJob", "Delete a waiting or ended job")
    def delete(self, request, job_id):
        job = get_visible_job(request.user, job_id)
        _call(services.delete_job, request.user, job)
        return self.reply(request, {"JobId": job_id})


class StopJobView(SdkView):
    """POST /api/v1/jobs/{JobId}/stop (StopJob)."""

    @sdk_action("StopJob", "Stop a job")
    def post(self, request, job_id):
        job = get_visible_job(request.user, job_id)
        _call(services.stop_job, request.user, job)
        return self.reply(request, {"JobId": job.job_id})


def _events(rows, q) -> list[str]:
    if start := params.timestamp(q, "StartTime"):
        rows = rows.filter(at__gte=start)
    if end := params.timestamp(q, "EndTime"):
        rows = rows.filter(at__lte=end)
    limit = params.integer(q, "MaxEventsNum", default=MAX_EVENTS, low=1, high=MAX_EVENTS)
    return [f"{params.fmt_time(e.at)} {e.type} {e.reason} {e.message}".rstrip() for e in rows.order_by("at", "pk")[:limit]]


class JobEventsView(SdkView):
    """GET /api/v1/jobs/{JobId}/events (GetJobEvents): one line per event, oldest first."""

    @sdk_action("GetJobEvents", "The job's events, one line each", query=("StartTime", "EndTime", "MaxEventsNum"))
    def get(self, request, job_id):
        job = get_visible_job(request.user, job_id)
        return self.reply(request, {"JobId": job.job_id, "Events": _events(job.events.all(), request.query_params)})


def _pod(job: Job, pod_id: str, pod_uid: str | None) -> Pod:
    """The pod PodId names (GetJob's Pods): its current incarnation, or the one PodUid names (its
    HistoryPods). An incarnation's own id, which the console shows, names that incarnation."""
    pods = list(Pod.objects.filter(job=job).order_by("-current", "-incarnation"))
    for pod in pods:
        pod.job = job
    named = [p for p in pods if p.name == pod_id] or [p for p in pods if p.pod_id == pod_id]
    if named and pod_uid:
        named = [p for p in pods if p.name == named[0].name and shapes.pod_uid(p) == pod_uid]
    if not named:
        raise not_found("Pod", pod_uid or pod_id)
    return named[0]


class PodLogsView(SdkView):
    """GET /api/v1/jobs/{JobId}/pods/{PodId}/logs (GetPodLogs): the first MaxLines lines of the log."""

    @sdk_action("GetPodLogs", "A pod's log lines", query=("PodUid", "MaxLines", "DownloadToFile", "Containers"))
    def get(self, request, job_id, pod_id):
        q = request.query_params
        job = get_visible_job(request.user, job_id)
        pod = _pod(job, pod_id, params.text(q, "PodUid"))
        max_lines = params.integer(q, "MaxLines", default=MAX_LOG_LINES, low=1, high=100000)
        params.boolean(q, "DownloadToFile")
        lines = read_logs(pod, 0, LOG_BYTES).lines[:max_lines]
        return self.reply(request, {
            "JobId": job.job_id, "PodId": pod.name, "PodUid": shapes.pod_uid(pod), "Logs": lines,
            "Containers": params.text(q, "Containers"),
            "ContainerInfo": {"MainContainer": job.job_type.removesuffix("Job").lower(), "SidecarContainers": []},
        })


class PodEventsView(SdkView):
    """GET /api/v1/jobs/{JobId}/pods/{PodId}/events (GetPodEvents)."""

    @sdk_action("GetPodEvents", "A pod's events, one line each", query=("PodUid", "StartTime", "EndTime", "MaxEventsNum"))
    def get(self, request, job_id, pod_id):
        q = request.query_params
        job = get_visible_job(request.user, job_id)
        pod = _pod(job, pod_id, params.text(q, "PodUid"))
        return self.reply(request, {
            "JobId": job.job_id, "PodId": pod.name, "PodUid": shapes.pod_uid(pod),
            "Events": _events(pod.events.all(), q),
        })

