"""DLC 2020-12-03 GetJobMetrics: per pod of a job, what it used over time, from the samples its
node's agent took (agent/metrics.py, jobs/metrics.py).

MetricType and its unit: GpuCoreUsage (percent, the mean over the pod's GPUs), GpuMemoryUsage
(MiB used on its GPUs), CpuCoreUsage (millicores: 1000 is one core busy), MemoryUsage (resident
MiB). The network and disk rates PAI also lists are not sampled, and are refused, not answered empty.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from api.jobs import get_visible_job
from apikit import params
from apikit.errors import invalid
from apikit.schema import sdk_action
from apikit.views import SdkView
from jobs.metrics import METRIC_COLUMNS, job_series

NOT_SAMPLED = ("NetworkInputRate", "NetworkOutputRate", "DiskReadRate", "DiskWriteRate")
STEP = re.compile(r"(\d+)([smhd]?)")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_POINTS = 11_000  # per pod: a window too fine for its length is refused, as Prometheus does


class JobMetricsView(SdkView):
    """GET /api/v1/jobs/{JobId}/metrics (GetJobMetrics)."""

    @sdk_action("GetJobMetrics", "Per pod, a metric of the job over time in steps", query=(
        "MetricType", "StartTime", "EndTime", "TimeStep", "Token"))
    def get(self, request, job_id):
        q = request.query_params
        job = get_visible_job(request.user, job_id)
        metric = _metric_type(q)
        end = params.timestamp(q, "EndTime") or timezone.now()
        start = params.timestamp(q, "StartTime") or end - timedelta(hours=1)
        if start >= end:
            raise invalid("StartTime", f"must be before EndTime ({params.fmt_time(end)}), got {params.fmt_time(start)}")
        step = _step(q)
        if (end - start) / step > MAX_POINTS:
            raise invalid("TimeStep", f"gives more than {MAX_POINTS} points between StartTime and EndTime; "
                                      f"use a longer step or a shorter window")
        series = job_series(job, metric, start, end, step)
        return self.reply(request, {"JobId": job.job_id, "PodMetrics": [
            {"PodId": pod_id, "Metrics": [{"Time": int(at.timestamp() * 1000), "Value": value}
                                          for at, value in points]}
            for pod_id, points in sorted(series.items())]})


def _metric_type(q) -> str:
    value = params.text(q, "MetricType")
    if value in NOT_SAMPLED:
        raise invalid("MetricType", f"{value} is not sampled here; one of {', '.join(METRIC_COLUMNS)}")
    if value is None:
        raise invalid("MetricType", f"is required: one of {', '.join(METRIC_COLUMNS)}")
    return params.choice(q, "MetricType", METRIC_COLUMNS)


def _step(q) -> timedelta:
    """TimeStep: seconds, or a number with s, m, h or d (`5m`); five minutes by default."""
    value = params.text(q, "TimeStep")
    if value is None:
        return timedelta(minutes=5)
    match = STEP.fullmatch(value.strip())
    if not match or int(match[1]) < 1:
        raise invalid("TimeStep", f"must be a whole number of seconds, or one with s, m, h or d (5m), got {value!r}")
    return timedelta(seconds=int(match[1]) * UNITS[match[2]])
