"""The snapshot the scheduler reads: frozen dataclasses, no behaviour beyond small helpers.

Times are datetimes (aware or naive, but all of one kind); prices are Decimal per minute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from .resources import Resources, total

# Resource types of a quota or public pool.
ECS = "ECS"
LINGJUN = "Lingjun"

# Queue strategies (rule 6).
STRICT_FIFO = "StrictFIFO"
BEST_EFFORT = "BestEffort"

# OversoldType of a job (rules 1-3).
FORBIDDEN = "ForbiddenQuotaOverSold"
ACCEPT = "AcceptQuotaOverSold"
FORCE = "ForceQuotaOverSold"

# Where a job's pods come from.
SOURCE_QUOTA = "quota"
SOURCE_SPOT = "spot"
SOURCE_PAYG = "payg"

# How a running pod holds its capacity.
KIND_GUARANTEED = "guaranteed"
KIND_IDLE = "idle"
KIND_SPOT = "spot"
KIND_PAYG = "payg"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    instance_type: str
    capacity: Resources
    quota_id: str | None = None  # None: the public pool of its instance type
    ready: bool = True
    gpu_ids: tuple[int, ...] | None = None  # None: 0 .. capacity.gpu - 1

    def gpu_indices(self) -> tuple[int, ...]:
        if self.gpu_ids is None:
            return tuple(range(self.capacity.gpu))
        return self.gpu_ids


@dataclass(frozen=True, slots=True)
class Quota:
    """A quota; its guaranteed capacity is the nodes assigned to it and to its descendants."""

    id: str
    tenant: str
    parent_id: str | None = None
    resource_type: str = ECS
    queue_strategy: str = BEST_EFFORT
    allow_priority_preemption: bool = False
    min_runtime_s: int = 0  # its idle (borrowing) pods are safe from reclaim this long
    # The head of its queue that does not fit gets a reservation, and the jobs behind it start
    # only where they do not delay it (scheduler/reservation.py). Off: BestEffort jobs pass it.
    backfill: bool = False
    # How long its jobs typically run (the snapshot's estimate from its finished jobs): what a
    # job without a maximum running time is expected to take (scheduler/reservation.py).
    typical_run: timedelta | None = None
    # Its share of idle capacity when several quotas borrow (scheduler/fair_share.py).
    weight: Decimal = Decimal(1)


@dataclass(frozen=True, slots=True)
class RunningPod:
    pod_id: str
    job_id: str
    node: str
    resources: Resources
    kind: str  # KIND_*
    started_at: datetime
    quota_id: str | None = None
    priority: int = 1
    gpu_indices: tuple[int, ...] = ()
    last_checkpoint_at: datetime | None = None
    terminating: bool = False  # being stopped: still holds capacity, never a victim
    bid: Decimal | None = None  # spot only
    protection_until: datetime | None = None  # spot only
    expected_end: datetime | None = None  # by its maximum running time (scheduler/reservation.py)
    # A worker of an elastic job above its MinParallelism: taking it shrinks the job, which keeps
    # running, instead of ending it (scheduler/elastic.py).
    spare: bool = False


    def work_since(self) -> datetime:
        """The point work would be resumed from if this pod stopped now."""
        return self.last_checkpoint_at or self.started_at


@dataclass(frozen=True, slots=True)
class PodRequest:
    role: str
    index: int
    resources: Resources
    instance_type: str | None = None  # None: any node of the scope


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: str
    submitted_at: datetime
    pods: tuple[PodRequest, ...]
    quota_id: str | None = None
    workspace: str = ""
    oversold_type: str = FORBIDDEN
    priority: int = 1  # 1 .. 9, higher first
    source: str = SOURCE_QUOTA
    bid: Decimal | None = None  # spot: price limit per minute
    max_run: timedelta | None = None  # its maximum running time, if it has one
    # Elastic (PAI's ElasticSpec): the first `min_pods` pods are the gang that must fit; the
    # others start where capacity allows (scheduler/elastic.py). 0: every pod is the gang.
    min_pods: int = 0
    # Derived once per job (a waiting job is planned again every cycle): the gang's total, and
    # its shape, (instance type, sizes) of its pods sorted, which alike gangs share.
    need: Resources = field(init=False, repr=False, compare=False)
    shape: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "need", total(p.resources for p in self.pods))
        object.__setattr__(self, "shape", tuple(sorted((p.instance_type or "", p.resources.as_tuple())
                                                       for p in self.pods)))


@dataclass(frozen=True, slots=True)
class ElasticJob:
    """A running elastic job below its MaxParallelism, which may grow (scheduler/elastic.py)."""

    job_id: str
    quota_id: str
    kind: str  # its pods' kind: KIND_GUARANTEED grows on its quota's nodes, KIND_IDLE borrows
    workers: int  # its pods running now
    pods: tuple[PodRequest, ...]  # the pods it may add, in the order they are added
    priority: int = 1


@dataclass(frozen=True, slots=True)
class MarketState:
    instance_type: str
    price: Decimal
    avg_price_1h: Decimal
    resource_type: str = ECS


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[Node, ...] = ()
    quotas: tuple[Quota, ...] = ()
    pods: tuple[RunningPod, ...] = ()
    jobs: tuple[PendingJob, ...] = ()
    markets: tuple[MarketState, ...] = field(default=())
    elastic: tuple[ElasticJob, ...] = ()  # running elastic jobs that may grow
