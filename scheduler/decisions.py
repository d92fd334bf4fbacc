"""What plan() returns: admissions, preemptions and a reason for every waiting job."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

# Why a running pod is preempted (rule 9).
RECLAIMED = "reclaimed"  # its lender quota needs the capacity back
HIGHER_PRIORITY = "higher_priority"  # a higher-priority job of the same quota
OUTBID = "outbid"  # spot: bid below the market price
STOCK_SHORT = "stock_short"  # spot: pay-as-you-go demand needs the inventory

# Why a job waits (rule 9).
QUOTA_FULL = "quota_full"
PARENT_QUOTA_FULL = "parent_quota_full"
QUOTA_NODES_BUSY = "quota_nodes_busy"  # guarantee has room, its nodes are held by others
NO_IDLE_CAPACITY = "no_idle_capacity"
GANG_DOES_NOT_FIT = "gang_does_not_fit"
NEVER_FITS = "never_fits"  # a pod is larger than any node in scope
WAITING_FOR_TERMINATION = "waiting_for_termination"
HELD_BEHIND_HEAD = "held_behind_head"
BID_BELOW_PRICE = "bid_below_price"
NO_STOCK = "no_stock"
UNKNOWN_QUOTA = "unknown_quota"
DEEP_IN_QUEUE = "deep_in_queue"  # not planned this cycle: behind the first jobs of its queue (cycle/waiting.py)

QUEUING = "Queuing"
BIDDING = "Bidding"


@dataclass(frozen=True, slots=True)
class PodPlacement:
    role: str
    index: int
    node: str
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: str
    kind: str  # model.KIND_*
    quota_id: str | None
    use_oversold: bool  # True: "Not in Quota" (idle, preemptible); False: "In Quota"
    placements: tuple[PodPlacement, ...]


@dataclass(frozen=True, slots=True)
class PreemptionReason:
    code: str  # RECLAIMED | HIGHER_PRIORITY | OUTBID | STOCK_SHORT
    message: str
    by_job: str | None = None
    by_quota: str | None = None
    price: Decimal | None = None  # OUTBID: the price the bid fell below
    bid: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Preemption:
    pod_id: str
    job_id: str
    node: str
    reason: PreemptionReason


@dataclass(frozen=True, slots=True)
class Growth:
    """A running elastic job takes more pods: bind them as an admission would, then restart the
    job's pods with the new world size (scheduler/elastic.py)."""

    job_id: str
    kind: str
    quota_id: str | None
    placements: tuple[PodPlacement, ...]
    workers_from: int
    workers_to: int


@dataclass(frozen=True, slots=True)
class Shrink:
    """A running elastic job loses the pods above its minimum that were preempted (they are in
    Decisions.preemptions) and keeps running with the rest, restarted at the new world size."""

    job_id: str
    workers_from: int
    workers_to: int
    message: str


@dataclass(frozen=True, slots=True)
class WaitReason:
    job_id: str
    status: str  # QUEUING | BIDDING
    code: str
    message: str  # in user terms, with the numbers
    queue: str  # "quota:<id>", "spot:<instance type>" or "payg:<instance type>"
    position: int = 0  # 1-based among the jobs still waiting in that queue
    waiting_for_pods: int = 0  # WAITING_FOR_TERMINATION: pods still terminating
    reserved_from: datetime | None = None  # the head of a backfill queue: its reservation's time
    reserved_nodes: tuple[str, ...] = ()  # and nodes (scheduler/reservation.py)


@dataclass(frozen=True, slots=True)
class Decisions:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    waiting: tuple[WaitReason, ...] = ()
    growths: tuple[Growth, ...] = ()
    shrinks: tuple[Shrink, ...] = ()

    def admission(self, job_id: str) -> Admission | None:
        return next((a for a in self.admissions if a.job_id == job_id), None)

    def wait_reason(self, job_id: str) -> WaitReason | None:
        return next((w for w in self.waiting if w.job_id == job_id), None)

    def preempted_pod_ids(self) -> tuple[str, ...]:
        return tuple(p.pod_id for p in self.preemptions)
