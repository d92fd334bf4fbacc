"""OpenDLC scheduler core: pure Python, no Django. A Snapshot in, Decisions out.

See scheduler/plan.py for the public API and the cycle.
"""

from .decisions import (
    Admission,
    Decisions,
    Growth,
    PodPlacement,
    Preemption,
    PreemptionReason,
    Shrink,
    WaitReason,
)
from .model import (
                        ACCEPT,
                        BEST_EFFORT,
                        ECS,
                        FORBIDDEN,
                        FORCE,
                        KIND_GUARANTEED,
                        KIND_IDLE,
                        KIND_PAYG,
                        KIND_SPOT,
                        LINGJUN,
                        SOURCE_PAYG,
                        SOURCE_QUOTA,
                        SOURCE_SPOT,
                        STRICT_FIFO,
                        ElasticJob,
                        MarketState,
                        Node,
                        PendingJob,
                        PodRequest,
                        Quota,
                        RunningPod,
                        Snapshot,
)
from .plan import plan
from .resources import ZERO, Resources

__all__ = [
    "plan", "Snapshot", "Node", "Quota", "RunningPod", "PendingJob", "PodRequest",
    "MarketState", "Resources", "ZERO", "Decisions", "Admission", "PodPlacement", "Preemption",
    "PreemptionReason", "WaitReason", "ECS", "LINGJUN", "STRICT_FIFO", "BEST_EFFORT",
    "FORBIDDEN", "ACCEPT", "FORCE", "SOURCE_QUOTA", "SOURCE_SPOT", "SOURCE_PAYG",
    "KIND_GUARANTEED", "KIND_IDLE", "KIND_SPOT", "KIND_PAYG", "ElasticJob", "Growth", "Shrink",
]
