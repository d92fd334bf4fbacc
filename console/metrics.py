"""`/metrics`: the platform in Prometheus' text format, for a bearer token (OPENDLC_METRICS_TOKEN).

Two kinds of metric, one answer:
  * counters and histograms that the processes observe where the event happens (the schedule
    cycle's steps, admissions, preemptions, restarts, pod starts, SDK requests), kept by each
    process in prometheus_client's multiprocess files under settings.OPENDLC_METRICS_DIR
    (one folder per host) and added up here;
  * gauges of the state, computed now from the database by the functions that already compute
    them for the console and the API (jobs.usage, spot.market_state, spot.pool), so that no cycle
    pays for them and nothing keeps a second account of them.

Label values are bounded: quota names, instance types, node statuses, reason codes, step and
action names; never a job, pod or node id.
"""

from __future__ import annotations

import glob
import hmac
import logging
import os
from collections import Counter

from celery import current_app
from django.conf import settings
from django.db.models import Count
from django.utils import timezone
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from cycle import watchdog
from jobs.models import Job
from jobs.states import WAITING
from jobs.usage import usage_by_quota
from quotas.models import Node, NodeStatus, Quota
from spot.market_state import current_markets
from spot.models import StockStatus
from spot.pool import public_pools

log = logging.getLogger(__name__)


@require_GET
def metrics(request):
    """The metrics, for `Authorization: Bearer <OPENDLC_METRICS_TOKEN>`. Without a token configured
    the page does not exist (404): open to loopback would be open to the world behind a proxy on
    the same host."""
    token = settings.OPENDLC_METRICS_TOKEN
    if not token:
        raise Http404("metrics are off: set OPENDLC_METRICS_TOKEN")
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        response = HttpResponse("a bearer token is required (OPENDLC_METRICS_TOKEN)\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    registry = CollectorRegistry()
    registry.register(ProcessFiles())
    registry.register(ClusterState())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class ProcessFiles:
    """The counters and histograms of every process of every host that shares the metrics folder."""

    def collect(self):
        files = glob.glob(os.path.join(settings.OPENDLC_METRICS_DIR, "*", "*.db"))
        return MultiProcessCollector.merge(files, accumulate=True)


class ClusterState:
    """Gauges of the state now, from the database (and the broker for the queues)."""

    def collect(self):
        yield from waiting_jobs()
        yield from quota_gpus()
        yield from spot_markets()
        yield nodes_by_status()
        yield celery_queues()
        yield scheduler_age()


def waiting_jobs():
    family = GaugeMetricFamily("opendlc_waiting_jobs", "Jobs in Queuing or Bidding, by quota (empty for spot and "
                               "pay-as-you-go), source and the scheduler's wait reason code (empty before a "
                               "cycle gave one)", labels=["quota", "source", "reason"])
    rows = (Job.objects.filter(status__in=WAITING).values("quota__name", "source", "wait_reason_code")
            .annotate(n=Count("id")).order_by())
    for row in rows:
        family.add_metric([row["quota__name"] or "", row["source"], row["wait_reason_code"]], row["n"])
    yield family


QUOTA_GPUS = (  # (metric, help, the jobs.usage.QuotaUsage field)
    ("opendlc_quota_guaranteed_gpus", "GPUs of a quota's nodes and its sub-quotas' nodes: its guarantee", "capacity"),
    ("opendlc_quota_used_gpus", "GPUs guaranteed pods of a quota's subtree hold", "guaranteed_used"),
    ("opendlc_quota_lent_gpus", "GPUs of a quota's subtree's nodes that other quotas' idle pods hold", "lent"),
    ("opendlc_quota_borrowed_gpus", "GPUs idle pods of a quota's subtree hold on other quotas' nodes", "borrowed"),
)


def quota_gpus():
    """jobs.usage's account, as the Quotas page and ListQuotas show it."""
    usage = usage_by_quota()
    names = dict(Quota.objects.filter(pk__in=usage).values_list("pk", "name"))
    for name, help_text, field in QUOTA_GPUS:
        family = GaugeMetricFamily(name, help_text, labels=["quota"])
        for pk, quota in sorted(usage.items()):
            family.add_metric([names[pk]], getattr(quota, field).gpu)
        yield family


def spot_markets():
    """spot.market_state's markets, as ListEcsSpecs and the Spot Market page show them."""
    markets = current_markets()
    price = GaugeMetricFamily("opendlc_spot_price", "Spot price per node-minute of an instance type's public pool",
                              labels=["instance_type"])
    stock = GaugeMetricFamily("opendlc_spot_stock_status", "1 for the spot stock status of an instance type "
                              "(SpotStockStatus), 0 for the others", labels=["instance_type", "status"])
    free = GaugeMetricFamily("opendlc_spot_free_nodes", "Ready public nodes of an instance type that no pod holds: "
                             "the stock, in whole nodes as the scheduler counts it", labels=["instance_type"])
    for instance_type, market in markets.items():
        price.add_metric([instance_type], float(market.price))
        for status in StockStatus.values:
            stock.add_metric([instance_type, status], int(market.stock_status == status))
    for instance_type, pool in sorted(public_pools().items()):
        free.add_metric([instance_type], pool.free_nodes)
    yield price
    yield stock
    yield free


def nodes_by_status() -> GaugeMetricFamily:
    family = GaugeMetricFamily("opendlc_nodes", "Nodes by status", labels=["status"])
    counts = Counter(dict(Node.objects.values_list("status").annotate(n=Count("id")).order_by()))
    for status in NodeStatus.values:
        family.add_metric([status], counts[status])
    return family


def scheduler_age() -> GaugeMetricFamily:
    """Alert on it: the watchdog's ERROR line in beat's log says the same (cycle/watchdog.py)."""
    family = GaugeMetricFamily("opendlc_scheduler_last_cycle_age_seconds",
                               "Seconds since a schedule cycle last finished (recorded every few seconds)")
    last = watchdog.last_cycle_at()
    if last is not None:
        family.add_metric([], max(0.0, (timezone.now() - last).total_seconds()))
    return family


def platform_queues() -> list[str]:
    """The Celery queues of the platform's workers: the default one and those tasks are routed to."""
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    return sorted({settings.CELERY_TASK_DEFAULT_QUEUE, *routed})


def celery_queues() -> GaugeMetricFamily:
    family = GaugeMetricFamily("opendlc_celery_queue_length", "Messages waiting in a platform Celery queue",
                               labels=["queue"])
    try:
        with current_app.connection_for_read() as conn:
            for queue in platform_queues():
                family.add_metric([queue], _queue_length(conn, queue))
    except OSError as exc:  # the broker is down: the other metrics still answer
        log.warning("metrics: cannot read the Celery queues (%s)", exc)
    return family


def _queue_length(conn, queue: str) -> int:
    try:
        return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
    except conn.channel_errors:  # Redis has no key for an empty queue, so a passive declare finds none
        return 0
