"""Reservations with backfill (EASY): the head of a backfill queue that does not fit gets the
earliest nodes where it will fit, and the jobs behind it start only where they do not delay it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler import plan
from scheduler.decisions import QUOTA_FULL

from .builders import NOW, make_job, make_pod, node, quota, snapshot

BACKFILL = [quota("q1", backfill=True, typical_run=timedelta(hours=3))]


def admitted(d):
    return sorted(a.job_id for a in d.admissions)


def test_a_long_job_behind_the_head_does_not_take_the_capacity_reserved_for_it():
    pods = [make_pod("p").on("n1").gpus(4).ends_in(120)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("small").gpus(2).priority(1)]
    d = plan(snapshot([node("n1", "q1")], BACKFILL, pods, jobs), NOW)
    assert admitted(d) == []
    w = d.wait_reason("big")
    assert (w.reserved_from, w.reserved_nodes) == (NOW + timedelta(minutes=120), ("n1",))
    assert w.code == QUOTA_FULL
    assert w.message.startswith("Reserved node n1 from about 14:00 UTC; 0 smaller job(s) "
                                "backfilled meanwhile. Now: Quota q1 is full")
    assert "held for job big's reservation" in d.wait_reason("small").message


def test_without_backfill_the_smaller_job_passes_the_head_as_before():
    pods = [make_pod("p").on("n1").gpus(4).ends_in(120)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("small").gpus(2).priority(1)]
    d = plan(snapshot([node("n1", "q1")], [quota("q1")], pods, jobs), NOW)
    assert admitted(d) == ["small"]
    assert d.wait_reason("big").reserved_from is None


@pytest.mark.parametrize("max_run, expected", [(60, ["small"]), (121, [])])
def test_a_job_expected_to_end_before_the_reservation_backfills_on_the_reserved_node(
        max_run, expected):
    pods = [make_pod("p").on("n1").gpus(4).ends_in(120)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("small").gpus(2).max_run(max_run)]
    d = plan(snapshot([node("n1", "q1")], BACKFILL, pods, jobs), NOW)
    assert admitted(d) == expected
    assert f"; {len(expected)} smaller job(s) backfilled" in d.wait_reason("big").message


def test_a_job_without_a_maximum_running_time_never_backfills_on_held_capacity():
    # Its quota's jobs typically run 30 minutes, but nothing ends it then: had it started, a run
    # longer than that would sit on the node the head waits for, and the head would wait on.
    short = [quota("q1", backfill=True, typical_run=timedelta(minutes=30))]
    pods = [make_pod("p").on("n1").gpus(4).ends_in(120)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("small").gpus(2)]
    d = plan(snapshot([node("n1", "q1")], short, pods, jobs), NOW)
    assert admitted(d) == []
    assert "held for job big's reservation" in d.wait_reason("small").message


def test_a_long_job_behind_the_head_runs_on_a_node_the_head_does_not_need():
    # n1 frees first, so the head reserves it; n2's free GPUs are not needed by the head.
    pods = [make_pod("p1").on("n1").gpus(4).ends_in(60), make_pod("p2").on("n2").gpus(6).ends_in(600)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("small").gpus(2)]
    d = plan(snapshot([node("n1", "q1"), node("n2", "q1")], BACKFILL, pods, jobs), NOW)
    assert [(a.job_id, a.placements[0].node) for a in d.admissions] == [("small", "n2")]
    assert d.wait_reason("big").reserved_nodes == ("n1",)


def test_a_gang_reserves_the_nodes_that_free_earliest():
    pods = [make_pod("p1").on("n1").gpus(8).ends_in(300), make_pod("p2").on("n2").gpus(8).ends_in(30),
            make_pod("p3").on("n3").gpus(2).ends_in(90)]
    jobs = [make_job("big").gpus(8).pods(2).priority(9), make_job("small").gpus(2)]
    nodes = [node("n1", "q1"), node("n2", "q1"), node("n3", "q1")]
    d = plan(snapshot(nodes, BACKFILL, pods, jobs), NOW)
    w = d.wait_reason("big")
    assert (w.reserved_from, w.reserved_nodes) == (NOW + timedelta(minutes=90), ("n2", "n3"))
    assert admitted(d) == []  # n3's 6 free GPUs are the head's


def test_a_pod_past_its_expected_end_keeps_the_reservation_on_its_node():
    # The estimate ran out an hour ago: the pod is expected to end any moment, and the reserved
    # node is still held, however long it overruns.
    pods = [make_pod("p").on("n1").gpus(4).ends_in(-60)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("small").gpus(2)]
    d = plan(snapshot([node("n1", "q1")], BACKFILL, pods, jobs), NOW)
    assert admitted(d) == []
    w = d.wait_reason("big")
    assert w.reserved_nodes == ("n1",)
    assert NOW + timedelta(minutes=5) < w.reserved_from < NOW + timedelta(minutes=6)


def test_a_later_job_does_not_reclaim_a_borrower_on_the_reserved_node():
    quotas = [quota("root"), quota("q1", "root", backfill=True, typical_run=timedelta(hours=3)),
              quota("q2", "root")]
    pods = [make_pod("own").on("n1").gpus(4).ends_in(60),
            make_pod("idle").on("n1").quota("q2").idle().gpus(4).ends_in(30)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("small").gpus(4)]
    d = plan(snapshot([node("n1", "q1"), node("n2", "q2")], quotas, pods, jobs), NOW)
    assert d.preemptions == ()
    assert d.wait_reason("big").reserved_nodes == ("n1",)


def test_a_borrower_counts_as_gone_now_so_the_reservation_does_not_move_when_it_is_reclaimed():
    # q1's head needs two of its 1-GPU nodes; n1 is lent to q2's borrower (expected to run for
    # hours), n2 and n3 free in 60 and 120 minutes. Counting the borrower as running on, the
    # head would reserve n2 and n3, a job behind it would reclaim n1, the head would then reserve
    # n1, which it could reclaim itself, and the borrower would come back to it: cycle after cycle.
    quotas = [quota("root"), quota("q1", "root", backfill=True, typical_run=timedelta(hours=3)),
              quota("q2", "root", typical_run=timedelta(hours=3))]
    nodes = [node("n1", "q1", gpus=1), node("n2", "q1", gpus=1), node("n3", "q1", gpus=1),
             node("n4", "q2", gpus=1)]
    pods = [make_pod("borrower").on("n1").quota("q2").idle().gpus(1).started(10),
            make_pod("own2").on("n2").gpus(1).ends_in(60), make_pod("own3").on("n3").gpus(1).ends_in(120),
            make_pod("home").on("n4").quota("q2").gpus(1)]
    jobs = [make_job("big").gpus(1).pods(2).priority(9), make_job("small").gpus(1)]
    d = plan(snapshot(nodes, quotas, pods, jobs), NOW)
    assert d.preemptions == ()
    w = d.wait_reason("big")
    assert (w.reserved_nodes, w.reserved_from) == (("n1", "n2"), NOW + timedelta(minutes=60))


def test_a_pod_without_a_maximum_running_time_is_expected_to_end_after_its_quotas_typical_run():
    # Started 30 minutes ago, in a quota whose jobs typically run 3 hours.
    pods = [make_pod("p").on("n1").gpus(4).started(30)]
    jobs = [make_job("big").gpus(8).priority(9)]
    d = plan(snapshot([node("n1", "q1")], BACKFILL, pods, jobs), NOW)
    assert d.wait_reason("big").reserved_from == NOW + timedelta(minutes=150)


def test_a_borrower_may_use_the_reserved_capacity_and_the_head_reclaims_it_when_the_node_frees():
    quotas = [quota("root"), quota("q1", "root", backfill=True, typical_run=timedelta(hours=3)),
              quota("q2", "root")]
    nodes = [node("n1", "q1"), node("n2", "q2")]
    pods = [make_pod("own").on("n1").gpus(4).ends_in(60), make_pod("full").on("n2").quota("q2").gpus(8)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("borrower").quota("q2").force().gpus(4)]
    d = plan(snapshot(nodes, quotas, pods, jobs), NOW)
    assert [(a.job_id, a.kind) for a in d.admissions] == [("borrower", "idle")]
    assert d.wait_reason("big").reserved_nodes == ("n1",)
    # An hour later q1's own pod has ended: the head reclaims the borrower's half of n1.
    idle = make_pod("borrowed").on("n1").quota("q2").idle().gpus(4).started(60).build()
    d = plan(snapshot(nodes, quotas, [pods[1], idle], [jobs[0]]), NOW)
    assert d.preempted_pod_ids() == ("borrowed",)


def test_a_strict_fifo_job_planned_in_pass_2_does_not_take_another_queues_reservation():
    # The parent's head reserves p1 and the child's node c1. The child's StrictFIFO head borrows
    # in pass 2, so the job behind it gets its whole turn there, after the reserved capacity went
    # back to borrowers: In Quota it must still not start on c1, where it would outlast the
    # reservation's time.
    quotas = [quota("P", backfill=True, typical_run=timedelta(hours=3)),
              quota("C", "P", queue_strategy="StrictFIFO")]
    nodes = [node("p1", "P"), node("p2", "P"), node("c1", "C")]
    pods = [make_pod("a").quota("P").on("p1").gpus(4).ends_in(60),
            make_pod("b").quota("P").on("p2").gpus(1).ends_in(600)]
    jobs = [make_job("big").quota("P").gpus(8).pods(2).priority(9),
            make_job("first").quota("C").accept().gpus(1).priority(5),
            make_job("second").quota("C").gpus(4).priority(5).submitted(30)]
    d = plan(snapshot(nodes, quotas, pods, jobs), NOW)
    assert d.wait_reason("big").reserved_nodes == ("c1", "p1")
    assert "second" not in admitted(d)
