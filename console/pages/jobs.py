"""Jobs list, job detail (pods, events, history, restarts, logs) and Stop."""

from datetime import datetime
from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import DecimalField, OuterRef, Prefetch, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST
from django_htmx.http import reswap, retarget

from console.pages.base import current_workspace, job_queryset, page
from console.templatetags.console_tags import mentioned_jobs
from cycle.estimate import TYPICAL_DAYS, Estimate, cached_estimates
from jobs import elastic
from jobs import logs as agent_logs
from jobs.dispatch import EVICTING_REASONS
from jobs.models import Job, JobSpec, Pod, Source
from jobs.services import ValidationFailed, can_change, stop_job
from jobs.states import FINAL, WAITING, JobStatus, PodStatus
from market import units
from spot.models import DailyBill

PAGE_SIZE = 50
MONEY = DecimalField(max_digits=14, decimal_places=6)


def with_cost(jobs):
    """Annotate `cost` = the sum of the job's daily bills (0 when none), in the same query."""
    bills = (
        DailyBill.objects.filter(job=OuterRef("pk")).order_by().values("job")
        .annotate(total=Sum("amount")).values("total")
    )
    return jobs.annotate(cost=Coalesce(Subquery(bills, output_field=MONEY), Value(Decimal("0"), output_field=MONEY)))


def filtered_jobs(request, workspace):
    jobs = job_queryset(request.user).filter(workspace=workspace) if workspace else Job.objects.none()
    status, source, q = (request.GET.get(k, "").strip() for k in ("status", "source", "q"))
    if status in JobStatus.values:
        jobs = jobs.filter(status=status)
    if source in Source.values:
        jobs = jobs.filter(source=source)
    if q:
        jobs = jobs.filter(Q(display_name__icontains=q) | Q(job_id__icontains=q))
    return jobs, {"status": status, "source": source, "q": q}


def list_rows(jobs):
    """The page's rows; the specs (for the bid) come in one extra query, pods are never touched."""
    specs = Prefetch("specs", queryset=JobSpec.objects.select_related("spec").order_by("id"))
    return with_cost(jobs).select_related("quota").prefetch_related(specs)


@login_required
def job_list(request):
    workspace = current_workspace(request)
    jobs, filters = filtered_jobs(request, workspace)
    paged = Paginator(list_rows(jobs), PAGE_SIZE).get_page(request.GET.get("page"))
    now = timezone.now()
    waiting = any(job.status in WAITING for job in paged.object_list)
    found = cached_estimates(now) if waiting else {}  # the whole queue's, computed once for every page
    rows = [JobRow(job, now, found) for job in paged.object_list]
    query = request.GET.urlencode()
    context = {
        "page_obj": paged, "rows": rows, "filters": filters, "query": query,
        "live": any(not r.final for r in rows), "statuses": JobStatus.choices, "sources": Source.choices,
    }
    return page(request, "console/jobs/list.html", context, nav="jobs", partial="rows")


def status_label(job: Job) -> str:
    """The status as the console shows it: a job failed by the preemption of its pods (reclaimed,
    spot released, node drained) says Preempted; the API keeps PAI's Failed with that reason."""
    return "Preempted" if job.status == JobStatus.FAILED and job.reason_code in EVICTING_REASONS else job.status


class JobRow:
    """What one line of the jobs list shows, computed from the job and its prefetched specs."""

    def __init__(self, job: Job, now=None, estimates=None):
        self.job = job
        self.final = job.status in FINAL
        self.status = status_label(job)
        self.specs = list(job.specs.all())
        self.duration = duration(job, now)
        self.estimate = start_estimate(job, estimates or {}, now or timezone.now())

    @property
    def bid(self) -> str:
        for spec in self.specs:
            if spec.spot_discount_limit is not None:
                return f"{spec.spot_discount_limit * 100:.0f}% of on-demand"
            if spec.spot_price_limit is not None:
                return units.hourly(spec.spot_price_limit)
        return ""


def start_estimate(job: Job, estimates: dict[str, Estimate], now) -> dict | None:
    """What the console shows of a waiting job's estimated start: the text, and its assumptions
    for the tooltip. None for a job that does not wait or that the last estimate did not see."""
    found = estimates.get(job.job_id) if job.status in WAITING else None
    if found is None:
        return None
    return {"text": estimate_text(found, now), "title": estimate_assumptions(found)}


def estimate_text(found: Estimate, now) -> str:
    if found.start is None:
        return f"not within {found.horizon.days} days (estimate)"
    minutes = max(0, round((found.start - now).total_seconds() / 60))
    if minutes == 0:
        return "starts within a minute (estimate)"
    if minutes < 120:
        return f"starts in about {minutes} min (estimate)"
    return f"starts in about {round(minutes / 60)} h (estimate)"


def estimate_assumptions(found: Estimate) -> str:
    typical = f"{round(found.typical_run.total_seconds() / 60)} min"
    whose = f"quota {found.quota}" if found.quota else "the public pool"
    basis = (f"the median run of {whose}'s jobs that finished in the last {TYPICAL_DAYS} days" if found.typical_from_history
             else f"a default: no job of {whose} finished in the last {TYPICAL_DAYS} days")
    text = (f"Estimated at {found.computed_at:%H:%M:%S} by running the scheduler forward from the cluster as it is, "
            "assuming each running job ends at its maximum running time (JobMaxRunningTimeMinutes) or, without one, "
            f"after its quota's typical run ({whose}: {typical}, {basis}), and that no job is submitted, stopped or "
            "restarted meanwhile.")
    if found.spot_price is not None:
        text += f" The spot price is assumed to stay at {units.hourly(found.spot_price)}."
    return text


def duration(job: Job, now=None):
    if not job.running_at:
        return None
    return (job.finished_at or now or timezone.now()) - job.running_at


# ---- detail ---------------------------------------------------------------------------------

def visible_job(request, job_id: str) -> Job:
    return get_object_or_404(with_cost(job_queryset(request.user)).select_related("quota", "workspace", "user"), job_id=job_id)


IDLE_LABEL = "idle resources"


def pod_rows(job: Job, viewer):
    """Pods, newest incarnation first; on borrowed idle nodes the node name is hidden from non-staff."""
    pods = job.pods.select_related("node__spec").order_by("role", "index", "-incarnation")
    rows = []
    for pod in pods:
        borrowed = pod.kind == "idle" and pod.node is not None and pod.node.quota_id != job.quota_id
        node_label = pod.node.name if pod.node and (viewer.is_staff or not borrowed) else (IDLE_LABEL if borrowed else "")
        rows.append({"pod": pod, "node_label": node_label, "borrowed": borrowed})
    return rows


def detail_context(request, job: Job) -> dict:
    pods = pod_rows(job, request.user)
    hidden = {r["pod"].node.name for r in pods if r["node_label"] == IDLE_LABEL}
    events = [redact(e, hidden) for e in job.events.order_by("-at", "-id")[:100]]
    now = timezone.now()
    estimate = start_estimate(job, cached_estimates(now), now) if job.status in WAITING else None
    history = [redact(t, hidden) for t in job.status_history.all()]
    texts = [job.reason_message, *(e.message for e in events), *(t.message for t in history),
             *(r["pod"].reason_message for r in pods)]
    return {
        "job": job, "specs": list(job.specs.select_related("spec")), "pods": pods, "estimate": estimate,
        "live": job.status not in FINAL, "events": events, "history": history, "restarts": list(job.restarts.all()),
        "can_stop": job.status not in FINAL and can_change(request.user, job), "linked": linked_jobs(request.user, texts),
        "running_since": running_since(job, history), "status": status_label(job),
        "elastic": elastic.summary(job, [r["pod"] for r in pods]), "resizes": [redact(e, hidden) for e in elastic.resizes(job)],
    }


def running_since(job: Job, history) -> datetime | None:
    """When the job's latest run began: none while it waits (re-queued after a restart), the
    latest move to Running otherwise (job.running_at is the first run's, GmtRunningTime)."""
    if job.status in WAITING:
        return None
    runs = [t.at for t in history if t.status == JobStatus.RUNNING]
    return runs[-1] if runs else job.running_at


def linked_jobs(viewer, texts) -> set[str]:
    """The jobs these texts name (a preempted job names its preemptor, and back) that the viewer may open."""
    mentioned = mentioned_jobs(texts)
    return set(job_queryset(viewer).filter(job_id__in=mentioned).values_list("job_id", flat=True)) if mentioned else set()


def redact(record, hidden_nodes: set[str]):
    """Event and history messages name nodes too: hide the same ones the pods table hides."""
    for name in hidden_nodes:
        record.message = record.message.replace(name, IDLE_LABEL)
    return record


def log_context(job: Job, pod: Pod | None, offset: int = 0, *, auto: bool = False) -> dict:
    """The Logs card's pod and text. `auto`: the card chose the pod itself (no ?pod=), so it keeps
    asking while the job lives, to move on to the next incarnation when the job restarts."""
    if pod is None:
        return {"log_pod": None, "wait_for_pod": job.status not in FINAL}
    text, next_offset = read_logs(pod, offset)
    follow = job.status not in FINAL and (auto or pod.status in (PodStatus.PENDING, PodStatus.RUNNING))
    return {"log_pod": pod, "text": text, "offset": next_offset, "follow": follow, "auto": auto}


def chosen_pod(job: Job, pods: list[dict], pod_id: str | None) -> Pod | None:
    """The pod whose logs show: the one asked for, else the first current pod that has started."""
    for row in pods:
        if row["pod"].pod_id == pod_id:
            return row["pod"]
    started = [r["pod"] for r in pods if r["pod"].current and r["pod"].started_at]
    return started[0] if started else None


@login_required
def job_detail(request, job_id):
    job = visible_job(request, job_id)
    context = detail_context(request, job)
    if not request.htmx:
        context |= log_context(job, chosen_pod(job, context["pods"], request.GET.get("pod")), auto="pod" not in request.GET)
    return page(request, "console/jobs/detail.html", context, nav="jobs", partial="live")


@login_required
@require_POST
def job_stop(request, job_id):
    job = visible_job(request, job_id)
    if not can_change(request.user, job):
        raise PermissionDenied("Only the user who submitted the job, or an owner or admin of its workspace, may stop it.")
    try:
        job = stop_job(request.user, job)
    except ValidationFailed as failed:
        messages.error(request, " ".join(failed.errors.values()))
    else:
        messages.success(request, f"{job.display_name} is {job.status}.")
    return redirect("console:job-detail", job_id=job.job_id)


LOG_CHUNK = 64 * 1024


@login_required
def job_logs(request, job_id):
    job = visible_job(request, job_id)
    if "pod" not in request.GET:  # the card of a page opened before any pod started, asking again
        return log_card(request, job)
    pod = get_object_or_404(Pod, job=job, pod_id=request.GET["pod"])
    if request.GET.get("auto") == "1" and not pod.current and job.status not in FINAL:
        # The job restarted: the card starts over with the next incarnation, once it has started.
        return retarget(reswap(log_card(request, job), "outerHTML"), "#logs")
    try:
        offset = max(0, int(request.GET.get("offset") or 0))
    except ValueError:
        offset = 0
    context = {"job": job} | log_context(job, pod, offset)
    # A fragment endpoint: always the partial, whether HTMX or a plain GET asked.
    return render(request, "console/jobs/detail.html#log-tail", context)


def log_card(request, job: Job):
    """The whole Logs card, on the pod it would choose for a page opened now."""
    pod = chosen_pod(job, pod_rows(job, request.user), None)
    return render(request, "console/jobs/detail.html#logs-card", {"job": job} | log_context(job, pod, auto=True))


def read_logs(pod, offset: int) -> tuple[str, int]:
    page = agent_logs.read_logs(pod, offset, LOG_CHUNK)
    return page.text, page.next_offset
