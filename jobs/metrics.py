"""Pods' usage as their agents sample it (agent/metrics.py, task `jobs.pod_metrics`), kept for
OPENDLC_POD_METRICS_RETENTION_S, and read back per pod in time steps for GetJobMetrics."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from jobs.models import Job, Pod, PodMetric

# GetJobMetrics' MetricType -> the sample's column. The network and disk rates are not sampled.
METRIC_COLUMNS = {"GpuCoreUsage": "gpu_util", "GpuMemoryUsage": "gpu_mem_mib", "CpuCoreUsage": "cpu_m",
                  "MemoryUsage": "mem_mib"}


def store_samples(items: list[dict], now: datetime | None = None) -> int:
    """Store the samples of known pods (a sample of a pod deleted meanwhile is dropped) and remove
    those older than the retention; returns how many were stored."""
    now = now or timezone.now()
    pods = dict(Pod.objects.filter(pod_id__in={i.get("pod_id") for i in items}).values_list("pod_id", "pk"))
    rows = [PodMetric(pod_id=pods[i["pod_id"]], at=min(_time(i.get("at")) or now, now),
                      cpu_m=_count(i.get("cpu_m")), mem_mib=_count(i.get("mem_mib")),
                      gpu_util=_optional(i.get("gpu_util")), gpu_mem_mib=_optional(i.get("gpu_mem_mib")))
            for i in items if i.get("pod_id") in pods]
    PodMetric.objects.bulk_create(rows)
    PodMetric.objects.filter(at__lt=now - timedelta(seconds=settings.OPENDLC_POD_METRICS_RETENTION_S)).delete()
    return len(rows)


def _time(value) -> datetime | None:
    # The agent's clock says when it sampled; never trust it beyond our own (see store_samples).
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _count(value) -> int:
    return max(0, int(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _optional(value) -> int | None:
    return None if value is None else _count(value)


def job_series(job: Job, metric_type: str, start: datetime, end: datetime, step: timedelta
               ) -> dict[str, list[tuple[datetime, float]]]:
    """Per pod of the job (every incarnation), the mean of `metric_type` over each step of
    [start, end); steps without a sample are left out. The window's samples are few (one per pod
    per heartbeat, within the retention), so the steps are averaged here."""
    column = METRIC_COLUMNS[metric_type]
    rows = (PodMetric.objects.filter(pod__job=job, at__gte=start, at__lt=end, **{f"{column}__isnull": False})
            .values_list("pod__pod_id", "at", column).order_by("pod__pod_id", "at"))
    buckets: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for pod_id, at, value in rows:
        buckets[pod_id][int((at - start) / step)].append(value)
    return {pod_id: [(start + n * step, sum(values) / len(values)) for n, values in sorted(steps.items())]
            for pod_id, steps in buckets.items()}

