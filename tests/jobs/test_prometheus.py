"""/metrics (console/metrics.py): refused without the token; after scheduled jobs, the counters moved
and the gauges say what jobs.usage and the wait reasons say; every label value from a bounded set."""

import json
import re
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import scheduler
from apikit.views import SdkView
from console.metrics import ClusterState, platform_queues
from cycle.schedule import STEPS
from jobs.models import Job, RestartRecord, Source
from jobs.services import create_job
from jobs.usage import usage_by_quota
from quotas.models import NodeStatus, Quota, ResourceSpec, Workspace
from scheduler import decisions as reasons
from spot.models import StockStatus
from spot.ticker import market_tick
from tests.jobs.conftest import CV, make_request, report

TOKEN = "metrics-test-token"


@pytest.fixture
def scrape(client, settings):
    """scrape() -> {(metric sample name, frozenset of label items): value} of GET /metrics."""
    settings.OPENDLC_METRICS_TOKEN = TOKEN

    def get() -> dict:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}
    return get


def moved(before: dict, after: dict, name: str, **labels) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0) - before.get(key, 0)


def test_metrics_is_not_found_while_no_token_is_configured(client, settings, db):
    settings.OPENDLC_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404


def test_metrics_refuses_a_request_without_the_token_or_with_another(client, settings, db):
    settings.OPENDLC_METRICS_TOKEN = TOKEN
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer another"}, {"HTTP_AUTHORIZATION": TOKEN}):
        response = client.get("/metrics", **headers)
        assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
        assert b"opendlc_" not in response.content
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


def test_a_scheduled_job_moves_the_counters_and_the_gauges_say_what_jobs_usage_says(bob, cycle, scrape):
    before = scrape()
    guaranteed = create_job(bob, make_request(pods=2))  # both nodes of nlp-team
    create_job(bob, make_request(pods=1, oversold_type="ForceQuotaOverSold"))  # borrows a node of cv-team
    waits = create_job(bob, make_request(pods=1))  # nlp-team is full
    cycle()
    after = scrape()

    assert moved(before, after, "opendlc_admissions_total", kind="guaranteed") == 1
    assert moved(before, after, "opendlc_admissions_total", kind="idle") == 1
    assert moved(before, after, "opendlc_admission_wait_seconds_count", kind="guaranteed") == 1
    for step in ("total", *STEPS):
        assert moved(before, after, "opendlc_schedule_cycle_duration_seconds_count", step=step) == 1
    waits.refresh_from_db()
    assert waits.wait_reason_code == reasons.QUOTA_FULL and guaranteed.job_id not in str(after)
    assert after[("opendlc_waiting_jobs", frozenset({"quota": "nlp-team", "source": "quota",
                                                     "reason": reasons.QUOTA_FULL}.items()))] == 1
    names = dict(Quota.objects.values_list("pk", "name"))
    for pk, usage in usage_by_quota().items():
        for metric, field in (("guaranteed", usage.capacity), ("used", usage.guaranteed_used),
                              ("lent", usage.lent), ("borrowed", usage.borrowed)):
            assert after[(f"opendlc_quota_{metric}_gpus", frozenset({"quota": names[pk]}.items()))] == field.gpu
    quota = lambda name: frozenset({"quota": name}.items())  # noqa: E731
    assert after[("opendlc_quota_used_gpus", quota("nlp-team"))] == 16
    assert after[("opendlc_quota_borrowed_gpus", quota("nlp-team"))] == 8
    assert after[("opendlc_quota_lent_gpus", quota("cv-team"))] == 8


def test_a_pod_start_a_preemption_and_a_restart_are_counted_by_reason(alice, bob, cycle, reports, scrape):
    before = scrape()
    borrower = create_job(bob, make_request(pods=1, oversold_type="ForceQuotaOverSold", ft_enabled=True))
    cycle()
    reports(*(report(p, "Running") for p in borrower.pods.all()))
    lender = create_job(alice, make_request(pods=2, quota_id=CV, workspace_id=Workspace.objects.get(name="vision-lab").pk))
    cycle()  # cv-team takes its node back
    reports(report(borrower.pods.get(current=True), "Failed", 143))
    after = scrape()

    assert moved(before, after, "opendlc_pod_start_latency_seconds_count") == 1
    assert moved(before, after, "opendlc_preemptions_total", reason=reasons.RECLAIMED) == 1
    assert moved(before, after, "opendlc_restarts_total", cause=RestartRecord.Cause.PREEMPTION) == 1
    assert Job.objects.get(pk=lender.pk).status == "Queuing"  # waits for the preempted pod, then runs


def test_a_pod_whose_end_report_overtook_its_running_report_has_its_start_timed_once(bob, cycle, reports, scrape):
    job = create_job(bob, make_request(pods=1))
    cycle()
    pod = job.pods.get()
    started = pod.bound_at + timedelta(seconds=3)
    before = scrape()
    # Two workers applied the agent's two batches out of order: the end first, repeating the start.
    reports({**report(pod, "Succeeded", 0, at=started + timedelta(seconds=1)), "started": started.isoformat()})
    reports(report(pod, "Running", at=started))
    after = scrape()

    assert moved(before, after, "opendlc_pod_start_latency_seconds_count") == 1
    assert moved(before, after, "opendlc_pod_start_latency_seconds_sum") == pytest.approx(3)
    pod.refresh_from_db()
    assert (pod.status, pod.started_at) == ("Succeeded", started)


def test_sdk_requests_are_timed_by_action_never_by_the_ids_in_their_path(bob, client, scrape):
    job = create_job(bob, make_request(pods=1))
    before = scrape()
    client.get(f"/api/v1/jobs/{job.job_id}")  # unsigned: refused, and still timed
    client.get(f"/api/v1/jobs/{job.job_id}/pods/{job.job_id}-worker-0/logs")
    after = scrape()

    assert moved(before, after, "opendlc_api_request_duration_seconds_count", action="GetJob") == 1
    assert moved(before, after, "opendlc_api_request_duration_seconds_count", action="GetPodLogs") == 1
    assert not [key for key in after if job.job_id in str(key)]


def test_every_label_value_comes_from_a_bounded_set(alice, bob, cycle, client, scrape):
    create_job(bob, make_request(pods=3))  # never fits nlp-team's two nodes
    create_job(bob, make_request(pods=1))
    market_tick()  # a price for every public pool
    cycle()
    client.get("/api/v1/quotas")
    bounded = {
        "step": {"total", *STEPS},
        "kind": {scheduler.KIND_GUARANTEED, scheduler.KIND_IDLE, scheduler.KIND_SPOT, scheduler.KIND_PAYG},
        "reason": {getattr(reasons, name) for name in dir(reasons) if name.isupper()} | {""},
        "cause": set(RestartRecord.Cause.values),
        "action": {method.sdk_action for view in _sdk_views() for method in vars(view).values()
                   if hasattr(method, "sdk_action")} | {"other"},
        "quota": set(Quota.objects.values_list("name", flat=True)) | {""},
        "source": set(Source.values),
        "status": set(NodeStatus.values) | set(StockStatus.values),
        "instance_type": set(ResourceSpec.objects.values_list("instance_type", flat=True)),
        "queue": set(platform_queues()),
        "le": None,  # a histogram's buckets: fixed in code
    }
    samples = [key for key in scrape() if key[0].startswith("opendlc_")]
    assert {name for name, _ in samples} >= {"opendlc_waiting_jobs", "opendlc_nodes", "opendlc_celery_queue_length",
                                             "opendlc_quota_used_gpus", "opendlc_spot_stock_status",
                                             "opendlc_spot_price", "opendlc_spot_free_nodes"}
    for name, labels in samples:
        for label, value in labels:
            assert label in bounded, f"{name} has an unbounded label {label}"
            assert bounded[label] is None or value in bounded[label], f"{name}{{{label}={value!r}}}"


def _sdk_views() -> list[type]:
    found, todo = [], [SdkView]
    while todo:
        found.append(view := todo.pop())
        todo += view.__subclasses__()
    return found


def test_the_dashboard_reads_prometheus_and_queries_only_metrics_that_metrics_serves(db):
    dashboard = json.loads((django_settings.BASE_DIR / "deploy/grafana/opendlc.json").read_text())
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    served = {family.name + suffix for family in [*REGISTRY.collect(), *ClusterState().collect()]
              for suffix in suffixes.get(family.type, ())}
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    queried = {name for p in panels for t in p["targets"] for name in re.findall(r"opendlc_\w+", t["expr"])}
    assert queried and queried <= served, queried - served
    assert {p["datasource"]["type"] for p in panels} == {"prometheus"}
    assert {"opendlc_admissions_total", "opendlc_quota_lent_gpus", "opendlc_celery_queue_length",
            "opendlc_api_request_duration_seconds_bucket", "opendlc_pod_start_latency_seconds_bucket"} <= queried
