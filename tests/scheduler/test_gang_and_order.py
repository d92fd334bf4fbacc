"""Rules 5 and 6: gangs are all-or-nothing and best-fit; queues keep their order."""

import pytest

from scheduler import STRICT_FIFO, plan
from scheduler.decisions import GANG_DOES_NOT_FIT, HELD_BEHIND_HEAD, QUOTA_FULL

from .builders import NOW, make_job, make_pod, node, quota, snapshot

QUOTAS = [quota("q1"), quota("q2")]


def admitted(d):
    return [a.job_id for a in d.admissions]


def test_a_gang_is_placed_whole_or_not_at_all():
    nodes = [node("n1", "q1"), node("n2", "q1")]
    pods = [make_pod("p").on("n2").gpus(4)]
    d = plan(snapshot(nodes, QUOTAS, pods, [make_job("a").gpus(8).pods(2)]), NOW)
    assert d.admissions == ()
    w = d.wait_reason("a")
    assert w.code == QUOTA_FULL
    assert w.message == ("Quota q1 is full: 4 GPU of 16 GPU guaranteed in use, "
                         "this job needs 16 GPU")


def test_a_fragmented_quota_says_the_gang_does_not_fit_any_set_of_nodes():
    nodes = [node("n1", "q1"), node("n2", "q1")]
    pods = [make_pod("p1").on("n1").gpus(4).quota("q2").idle().started(1),
            make_pod("p2").on("n2").gpus(4).quota("q2").idle().started(1)]
    quotas = [quota("q1"), quota("q2", min_runtime_s=3600)]
    d = plan(snapshot(nodes, quotas, pods, [make_job("a").gpus(8)]), NOW)
    w = d.wait_reason("a")
    assert w.code == GANG_DOES_NOT_FIT
    assert "8 GPU free in total but at most 4 GPU free on one node" in w.message


@pytest.mark.parametrize("used, gpus, expected", [
    ({"n1": 6, "n2": 0}, 2, "n1"),       # fewest free GPUs left
    ({"n1": 0, "n2": 4}, 4, "n2"),
    ({"n1": 4, "n2": 4}, 2, "n1"),       # tie: node name
])
def test_it_places_each_pod_best_fit(used, gpus, expected):
    nodes = [node("n1", "q1"), node("n2", "q1")]
    pods = [make_pod(f"p-{n}").on(n).gpus(g) for n, g in used.items() if g]
    d = plan(snapshot(nodes, QUOTAS, pods, [make_job("a").gpus(gpus)]), NOW)
    assert d.admission("a").placements[0].node == expected


def test_pods_on_one_node_get_distinct_free_gpu_indices():
    pods = [make_pod("p").on("n1").gpus(2).gpu_indices(0, 3)]
    d = plan(snapshot([node("n1", "q1")], QUOTAS, pods, [make_job("a").gpus(3).pods(2)]), NOW)
    got = [p.gpu_indices for p in d.admission("a").placements]
    assert got == [(1, 2, 4), (5, 6, 7)]


def test_within_a_quota_priority_then_submit_time_decide():
    jobs = [make_job("old-low").gpus(8).priority(1).submitted(90),
            make_job("new-high").gpus(8).priority(9).submitted(1),
            make_job("old-high").gpus(8).priority(9).submitted(60)]
    d = plan(snapshot([node("n1", "q1")], QUOTAS, jobs=jobs), NOW)
    assert admitted(d) == ["old-high"]
    assert [(w.job_id, w.position) for w in d.waiting] == [("new-high", 1), ("old-low", 2)]


@pytest.mark.parametrize("strategy, expected_admitted, small_code", [
    (STRICT_FIFO, [], HELD_BEHIND_HEAD),
    ("BestEffort", ["small"], None),
])
def test_strict_fifo_holds_behind_the_head_and_best_effort_backfills(
        strategy, expected_admitted, small_code):
    quotas = [quota("q1", queue_strategy=strategy)]
    pods = [make_pod("p").on("n1").gpus(4)]
    jobs = [make_job("big").gpus(8).priority(9), make_job("small").gpus(2).priority(1)]
    d = plan(snapshot([node("n1", "q1")], quotas, pods, jobs), NOW)
    assert admitted(d) == expected_admitted
    if small_code:
        w = d.wait_reason("small")
        assert (w.code, w.position) == (small_code, 2)
        assert w.message.startswith("Held behind job big, the head of the StrictFIFO queue")


def test_across_quotas_the_higher_priority_head_borrows_first():
    quotas = [quota("root"), quota("q1", "root"), quota("q2", "root"), quota("q3", "root")]
    nodes = [node("n1", "q1"), node("n2", "q2"), node("n3", "q3")]
    pods = [make_pod("p3").on("n3").quota("q3").gpus(8), make_pod("p2").on("n2").quota("q2")
            .gpus(8)]
    jobs = [make_job("early-low").quota("q2").force().gpus(8).priority(1).submitted(100),
            make_job("late-high").quota("q3").force().gpus(8).priority(5).submitted(1)]
    d = plan(snapshot(nodes, quotas, pods, jobs), NOW)
    assert admitted(d) == ["late-high"]


def test_the_lenders_own_job_goes_before_borrowers_of_equal_priority():
    quotas = [quota("root"), quota("q1", "root"), quota("q2", "root")]
    nodes = [node("n1", "q1"), node("n2", "q2")]
    pods = [make_pod("p2").on("n2").quota("q2").gpus(8)]
    jobs = [make_job("borrow").quota("q2").force().gpus(8).submitted(100),
            make_job("own").quota("q1").gpus(8).submitted(1)]
    d = plan(snapshot(nodes, quotas, pods, jobs), NOW)
    assert admitted(d) == ["own"]


STRICT_TREE = [quota("root"), quota("q1", "root", queue_strategy=STRICT_FIFO), quota("q2", "root")]
STRICT_NODES = [node("n1", "q1"), node("n2", "q2")]


def test_a_strict_fifo_head_that_runs_idle_lets_the_jobs_behind_it_in_after_it():
    # The head does not fit q1 (6 of 8 GPUs used) but fits idle on n2; the small job behind
    # it fits q1 and is admitted only once the head is.
    pods = [make_pod("p1").on("n1").gpus(6)]
    jobs = [make_job("head").accept().gpus(4).priority(9), make_job("small").gpus(2)]
    d = plan(snapshot(STRICT_NODES, STRICT_TREE, pods, jobs), NOW)
    assert [(a.job_id, a.kind) for a in d.admissions] == [("head", "idle"),
                                                           ("small", "guaranteed")]


def test_a_strict_fifo_head_that_fits_neither_in_quota_nor_idle_holds_the_queue():
    pods = [make_pod("p1").on("n1").gpus(6), make_pod("p2").on("n2").quota("q2").gpus(6)]
    jobs = [make_job("head").accept().gpus(4).priority(9), make_job("small").gpus(2)]
    d = plan(snapshot(STRICT_NODES, STRICT_TREE, pods, jobs), NOW)
    assert d.admissions == ()
    w = d.wait_reason("small")
    assert (w.code, w.position) == (HELD_BEHIND_HEAD, 2)
    assert "which waits: In quota: Quota q1 is full" in w.message
    assert "; Not in quota: The gang of 1 pod(s) (4 GPU) does not fit" in w.message


def test_a_strict_fifo_head_waiting_for_idle_capacity_yields_it_to_another_quotas_own_job():
    # The head of q1 ranks first but could only borrow n2; q2's own job takes n2 In Quota.
    pods = [make_pod("p1").on("n1").gpus(8)]
    jobs = [make_job("head").accept().gpus(8).priority(9), make_job("behind").gpus(1),
            make_job("own").quota("q2").gpus(8).priority(1)]
    d = plan(snapshot(STRICT_NODES, STRICT_TREE, pods, jobs), NOW)
    assert [a.job_id for a in d.admissions] == ["own"]
    assert d.wait_reason("behind").code == HELD_BEHIND_HEAD


@pytest.mark.parametrize("enabled", [True, False])
def test_a_cycle_leaves_the_garbage_collector_as_it_found_it(enabled, monkeypatch):
    import gc
    import importlib

    cycle = importlib.import_module("scheduler.plan").Cycle  # the module, not scheduler.plan()
    seen, real_run = [], cycle.run

    def run(self):
        seen.append(gc.isenabled())  # off while the cycle runs
        return real_run(self)

    monkeypatch.setattr(cycle, "run", run)
    (gc.enable if enabled else gc.disable)()
    try:
        plan(snapshot([node("n1", "q1")], QUOTAS, [], [make_job("a").gpus(1)]), NOW)
        assert seen == [False] and gc.isenabled() is enabled
    finally:
        gc.enable()
