"""Scheduler behaviour the replay ran into, recorded for the scheduler's owner.

tracesim works around it (engine.Replay._reclaimers_first); these tests fail until plan()
itself gives a lender the capacity it reclaimed.
"""

import pytest

from scheduler import KIND_GUARANTEED, plan
from tests.scheduler.builders import NOW, make_job, make_pod, node, quota, snapshot

TREE = [quota("root"), quota("a", "root"), quota("b", "root")]
NODES = [node("a1", "a"), node("b1", "b")]


@pytest.mark.xfail(strict=True, reason=(
    "plan() reserves nothing across cycles and orders heads only by FORCE, priority and "
    "submit time: once the victims of a reclaim are gone, an Acceptable job of another quota "
    "submitted earlier borrows the freed node and the lender waits; next cycle it reclaims "
    "again (min_runtime_s 0): a preemption every cycle while such borrowers wait, and the "
    "lender starves"))
def test_the_next_cycle_gives_the_lender_the_capacity_it_reclaimed():
    # Cycle 1 preempted a borrower on a1 for job `lender`; its pods are gone now.
    pods = [make_pod("b-own").on("b1").quota("b").gpus(8)]
    jobs = [make_job("borrower").quota("b").gpus(8).accept().submitted(60),
            make_job("lender").quota("a").gpus(8).forbidden().submitted(1)]
    decisions = plan(snapshot(NODES, TREE, pods, jobs), NOW)
    admitted = decisions.admission("lender")
    assert admitted is not None and admitted.kind == KIND_GUARANTEED


def test_the_earlier_borrower_is_then_reclaimed_from_the_lenders_node_again():
    """The other half of the loop: with the borrower on a1, the lender preempts it again."""
    pods = [make_pod("b-own").on("b1").quota("b").gpus(8),
            make_pod("borrower-0").job("borrower").on("a1").quota("b").gpus(8).idle()
            .started(0)]
    jobs = [make_job("lender").quota("a").gpus(8).forbidden().submitted(1)]
    assert plan(snapshot(NODES, TREE, pods, jobs), NOW).preempted_pod_ids() == ("borrower-0",)
