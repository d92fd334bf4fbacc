"""Small builders for scheduler tests, Kueue style: make_job("a").gpus(4).priority(9)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from scheduler import (
    ACCEPT, FORBIDDEN, FORCE, KIND_GUARANTEED, KIND_IDLE, KIND_PAYG, KIND_SPOT, SOURCE_PAYG,
    SOURCE_SPOT, MarketState, Node, PendingJob, PodRequest, Quota, Resources, RunningPod, Snapshot,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
GPU_TYPE = "ecs.gn7-8xA100"


def per_gpu(n: int) -> Resources:
    """n GPUs with their share of an 8-GPU node: 8 vCPU and 64 GiB each."""
    return Resources(n, n * 8000, n * 64 * 1024)


def node(name: str, quota: str | None = None, gpus: int = 8, itype: str = GPU_TYPE,
         ready: bool = True) -> Node:
    return Node(name, itype, per_gpu(gpus), quota, ready)


def quota(qid: str, parent: str | None = None, tenant: str = "acme", **kw) -> Quota:
    return Quota(qid, tenant, parent, **kw)


def minutes_ago(m: float) -> datetime:
    return NOW - timedelta(minutes=m)


class make_job:  # noqa: N801 - reads like the builder it is
    def __init__(self, job_id: str):
        self._kw = dict(job_id=job_id, submitted_at=minutes_ago(60), quota_id="q1")
        self._gpus, self._count, self._itype = 1, 1, None

    def quota(self, qid):
        self._kw["quota_id"] = qid
        return self

    def gpus(self, n):
        self._gpus = n
        return self

    def pods(self, count):
        self._count = count
        return self

    def of_type(self, itype):
        self._itype = itype
        return self

    def priority(self, p):
        self._kw["priority"] = p
        return self

    def submitted(self, minutes_before_now):
        self._kw["submitted_at"] = minutes_ago(minutes_before_now)
        return self

    def accept(self):
        self._kw["oversold_type"] = ACCEPT
        return self

    def force(self):
        self._kw["oversold_type"] = FORCE
        return self

    def forbidden(self):
        self._kw["oversold_type"] = FORBIDDEN
        return self

    def max_run(self, minutes):
        self._kw["max_run"] = timedelta(minutes=minutes)
        return self

    def elastic(self, min_pods):
        """Elastic: `pods(n)` is its MaxParallelism, `min_pods` its MinParallelism."""
        self._kw["min_pods"] = min_pods
        return self

    def spot(self, bid):
        self._kw.update(source=SOURCE_SPOT, bid=Decimal(bid), quota_id=None)
        self._itype = self._itype or GPU_TYPE
        return self

    def payg(self):
        self._kw.update(source=SOURCE_PAYG, quota_id=None)
        self._itype = self._itype or GPU_TYPE
        return self

    def build(self) -> PendingJob:
        pods = tuple(PodRequest("worker", i, per_gpu(self._gpus), self._itype)
                     for i in range(self._count))
        return PendingJob(pods=pods, **self._kw)


class make_pod:  # noqa: N801
    def __init__(self, pod_id: str):
        self._kw = dict(pod_id=pod_id, job_id=f"job-{pod_id}", node="n1", kind=KIND_GUARANTEED,
                        started_at=minutes_ago(30), quota_id="q1")
        self._gpus = 1

    def on(self, node_name):
        self._kw["node"] = node_name
        return self

    def job(self, job_id):
        self._kw["job_id"] = job_id
        return self

    def quota(self, qid):
        self._kw["quota_id"] = qid
        return self

    def gpus(self, n):
        self._gpus = n
        return self

    def gpu_indices(self, *ids):
        self._kw["gpu_indices"] = tuple(ids)
        return self

    def idle(self):
        self._kw["kind"] = KIND_IDLE
        return self

    def priority(self, p):
        self._kw["priority"] = p
        return self

    def started(self, minutes_before_now):
        self._kw["started_at"] = minutes_ago(minutes_before_now)
        return self

    def checkpoint(self, minutes_before_now):
        self._kw["last_checkpoint_at"] = minutes_ago(minutes_before_now)
        return self

    def terminating(self):
        self._kw["terminating"] = True
        return self

    def spare(self):
        """A worker above its elastic job's minimum."""
        self._kw["spare"] = True
        return self

    def ends_in(self, minutes):
        self._kw["expected_end"] = NOW + timedelta(minutes=minutes)
        return self

    def spot(self, bid, protected_minutes: float = 0):
        self._kw.update(kind=KIND_SPOT, quota_id=None, bid=Decimal(bid))
        if protected_minutes:
            self._kw["protection_until"] = NOW + timedelta(minutes=protected_minutes)
        return self

    def payg(self):
        self._kw.update(kind=KIND_PAYG, quota_id=None)
        return self

    def build(self) -> RunningPod:
        return RunningPod(resources=per_gpu(self._gpus), **self._kw)


def market(price, avg=None, itype: str = GPU_TYPE, resource_type: str = "ECS") -> MarketState:
    return MarketState(itype, Decimal(price), Decimal(avg if avg is not None else price),
                       resource_type)


def snapshot(nodes=(), quotas=(), pods=(), jobs=(), markets=(), elastic=()) -> Snapshot:
    def built(items):
        return tuple(i.build() if hasattr(i, "build") else i for i in items)
    return Snapshot(tuple(nodes), tuple(quotas), built(pods), built(jobs), tuple(markets),
                    tuple(elastic))
