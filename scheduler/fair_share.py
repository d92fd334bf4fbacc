"""Fair sharing of idle capacity: dominant-resource shares (Kueue's fair sharing, Volcano's DRF).

A quota's borrowed share is, over GPU, CPU and memory, the largest fraction of its lending scope's
capacity that its idle (borrowing) pods hold, divided by its `weight`. When several quotas borrow,
the one furthest below its weighted share goes first (plan.py, step 5's second pass), and a
reclaim takes first from the borrower furthest above it (preemption.reclaim_order). So two
equally hungry borrowers of weights 1 and 2 end up holding idle capacity in the ratio 1 : 2.
"""

from __future__ import annotations

from fractions import Fraction

from .model import KIND_IDLE, RunningPod
from .resources import Resources


class Shares:
    """Each quota's borrowed capacity: its running idle pods, plus what this cycle admits idle."""

    def __init__(self, pods: tuple[RunningPod, ...]):
        self._known: dict[tuple, float] = {}  # pass 2 asks for a share at every turn
        self.borrowed: dict[str, list[int]] = {}
        for pod in pods:
            if pod.kind == KIND_IDLE and not pod.terminating and pod.quota_id is not None:
                self.add(pod.quota_id, pod.resources)
        self.at_start = {qid: tuple(used) for qid, used in self.borrowed.items()}

    def add(self, qid: str, amount: Resources) -> None:
        self._known.pop((qid, False), None)
        acc = self.borrowed.setdefault(qid, [0, 0, 0])
        for i, value in enumerate(amount.as_tuple()):
            acc[i] += value

    def share(self, qid: str, capacity, weight, at_start: bool = False) -> float:
        """Its dominant share of `capacity` (its lending scope's), divided by its weight.

        Computed exactly, then rounded once to a float: equal shares stay equal, and the heap
        of pass 2 and the victim order compare floats, which is several times cheaper than
        comparing Fractions there."""
        found = self._known.get((qid, at_start))
        if found is None:
            found = self._known[(qid, at_start)] = self._share(qid, capacity, weight, at_start)
        return found

    def _share(self, qid: str, capacity, weight, at_start: bool) -> float:
        used = self.at_start.get(qid) if at_start else self.borrowed.get(qid)
        if not used or weight <= 0:
            return 0.0
        dominant = max((Fraction(used[i], capacity[i]) for i in range(3) if capacity[i]),
                       default=Fraction(0))
        return float(dominant / Fraction(weight))
