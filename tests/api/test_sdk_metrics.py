"""DLC GetJobMetrics through the official SDK: the samples the agents sent (stored as jobs.pod_metrics
stores them), per pod in time steps; a job of another workspace does not exist; bad input names the field."""

from datetime import timedelta

import pytest
from alibabacloud_pai_dlc20201203 import models as dlc
from django.utils import timezone

from jobs import metrics
from jobs.models import Job, Pod, PodMetric
from quotas.models import Workspace
from tests.api.conftest import dlc_client, key_of
from tests.api.test_sdk_studio import rejected


@pytest.fixture
def sampled(bob):
    """A running job of bob with one pod, sampled three times by its agent: at 0 s, 30 s and 6 min."""
    job = Job.objects.create(job_id="dlc-sampled", workspace=Workspace.objects.get(name="ml-research"), user=bob,
                             display_name="sampled", user_command="x", status="Running")
    Pod.objects.create(pod_id="sampled-worker-0", job=job, role="Worker", index=0, status="Running")
    t0 = (timezone.now() - timedelta(minutes=30)).replace(second=0, microsecond=0)
    metrics.store_samples([
        {"pod_id": "sampled-worker-0", "at": (t0 + timedelta(seconds=s)).isoformat(), "cpu_m": cpu, "mem_mib": 2048,
         "gpu_util": util, "gpu_mem_mib": 1024}
        for s, cpu, util in ((0, 1000, 80), (30, 3000, 90), (360, 500, None))
    ] + [{"pod_id": "no-such-pod", "at": t0.isoformat(), "cpu_m": 1, "mem_mib": 1}])
    return job, t0


def iso(at) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_job_metrics_are_the_agents_samples_averaged_per_step(bob_dlc, sampled):
    job, t0 = sampled
    body = bob_dlc.get_job_metrics(job.job_id, dlc.GetJobMetricsRequest(
        metric_type="CpuCoreUsage", start_time=iso(t0), end_time=iso(t0 + timedelta(minutes=10)), time_step="5m")).body
    assert body.job_id == job.job_id
    [pod] = body.pod_metrics
    assert pod.pod_id == "sampled-worker-0"
    ms = int(t0.timestamp() * 1000)
    assert [(m.time, m.value) for m in pod.metrics] == [(ms, 2000.0), (ms + 300_000, 500.0)]


def test_gpu_utilization_leaves_out_samples_without_nvml(bob_dlc, sampled):
    job, t0 = sampled
    [pod] = bob_dlc.get_job_metrics(job.job_id, dlc.GetJobMetricsRequest(
        metric_type="GpuCoreUsage", start_time=iso(t0), time_step="60", end_time=iso(t0 + timedelta(hours=1)))
    ).body.pod_metrics
    assert [m.value for m in pod.metrics] == [85.0]


def test_samples_older_than_the_retention_are_removed(sampled, settings):
    settings.OPENDLC_POD_METRICS_RETENTION_S = 60
    metrics.store_samples([{"pod_id": "sampled-worker-0", "at": timezone.now().isoformat(), "cpu_m": 1, "mem_mib": 1}])
    assert PodMetric.objects.count() == 1


def test_a_job_of_another_workspace_has_no_metrics_to_show(endpoint, charlie, mallory, sampled):
    for user in (charlie, mallory):
        client = dlc_client(endpoint, *key_of(user))
        error = rejected(lambda client=client: client.get_job_metrics("dlc-sampled", dlc.GetJobMetricsRequest(metric_type="MemoryUsage")))
        assert (error.status_code, error.code) == (404, "EntityNotExist.Job")


@pytest.mark.parametrize("request_, field", [
    (dlc.GetJobMetricsRequest(), "MetricType"),
    (dlc.GetJobMetricsRequest(metric_type="DiskReadRate"), "MetricType"),
    (dlc.GetJobMetricsRequest(metric_type="CpuCoreUsage", time_step="fast"), "TimeStep"),
    (dlc.GetJobMetricsRequest(metric_type="CpuCoreUsage", time_step="1s", start_time="2020-01-01T00:00:00Z"),
     "TimeStep"),
    (dlc.GetJobMetricsRequest(metric_type="CpuCoreUsage", start_time="yesterday"), "StartTime"),
    (dlc.GetJobMetricsRequest(metric_type="CpuCoreUsage", start_time="2030-01-01T00:00:00Z"), "StartTime"),
])
def test_bad_metric_requests_name_the_field(bob_dlc, sampled, request_, field):
    error = rejected(lambda: bob_dlc.get_job_metrics("dlc-sampled", request_))
    assert (error.status_code, error.code) == (400, "InvalidParameter") and f"{field}:" in error.message
