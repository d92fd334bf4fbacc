"""tracesim.forward: the real scheduler run forward from a snapshot, on small clusters computed by hand."""

from datetime import timedelta

from tests.scheduler.builders import NOW, make_job, make_pod, node, quota, snapshot
from tracesim.forward import estimate_starts, queue_window

WEEK = timedelta(days=7)


def minutes(m: float):
    return NOW + timedelta(minutes=m)


def two_nodes(pods, jobs):
    return snapshot([node("n1", "q1"), node("n2", "q1")], [quota("q1")], pods, jobs)


def test_it_starts_each_waiting_job_when_the_runs_before_it_end():
    # n1: r1 holds 8 GPUs until +10; n2: r2 holds 4 until +30. The queue in order: a (8 GPUs, 20 min),
    # b (4, 60), c (8, 15). By hand: b backfills n2's 4 free GPUs at once (BestEffort); a takes n1
    # when r1 ends at +10 and runs to +30; then c takes n1, as n2 still holds b.
    cluster = two_nodes(
        [make_pod("r1").job("r1").on("n1").gpus(8), make_pod("r2").job("r2").on("n2").gpus(4)],
        [make_job("a").gpus(8).submitted(30), make_job("b").gpus(4).submitted(20), make_job("c").gpus(8).submitted(10)])
    forecast = estimate_starts(cluster, NOW, {"r1": minutes(10), "r2": minutes(30)},
                               {"a": timedelta(minutes=20), "b": timedelta(minutes=60), "c": timedelta(minutes=15)}, WEEK)
    assert forecast.starts == {"a": minutes(10), "b": NOW, "c": minutes(30)}


def test_a_job_that_cannot_start_within_the_horizon_has_no_start():
    # r1 holds both nodes for eight days: big never starts within the week; huge never fits the quota.
    cluster = two_nodes(
        [make_pod("r1a").job("r1").on("n1").gpus(8), make_pod("r1b").job("r1").on("n2").gpus(8)],
        [make_job("big").gpus(8), make_job("huge").gpus(8).pods(3)])
    forecast = estimate_starts(cluster, NOW, {"r1": NOW + timedelta(days=8)},
                               {"big": timedelta(hours=1), "huge": timedelta(hours=1)}, WEEK)
    assert forecast.starts == {"big": None, "huge": None}
    longer = estimate_starts(cluster, NOW, {"r1": NOW + timedelta(days=8)},
                             {"big": timedelta(hours=1), "huge": timedelta(hours=1)}, timedelta(days=9))
    assert longer.starts == {"big": NOW + timedelta(days=8), "huge": None}


def test_a_reclaimed_borrower_queues_again_and_runs_what_it_lost_since_its_checkpoint():
    # b, q2's borrower on q1's n1, runs until +60 and checkpointed 10 min ago. By hand: own (q1) reclaims
    # n1 at once; b queues again and, ahead of y by priority, takes q2's n2 when x ends at +5, for the
    # 60 + 10 minutes it has left since its checkpoint; y gets n2 when b ends at +75.
    cluster = snapshot(
        [node("n1", "q1"), node("n2", "q2")], [quota("root"), quota("q1", "root"), quota("q2", "root")],
        [make_pod("b").job("b").on("n1").gpus(8).idle().quota("q2").priority(2).checkpoint(10),
         make_pod("x").job("x").on("n2").gpus(8).quota("q2")],
        [make_job("own").gpus(8).quota("q1"), make_job("y").gpus(8).quota("q2").forbidden()])
    forecast = estimate_starts(cluster, NOW, {"b": minutes(60), "x": minutes(5)},
                               {"own": timedelta(minutes=30), "y": timedelta(minutes=30)}, WEEK)
    assert forecast.starts == {"own": NOW, "y": minutes(75)}


def test_the_window_plans_only_the_head_of_each_queue_as_a_cycle_does():
    # n2 has 4 GPUs free now: with the whole queue planned c backfills them at once; planning only the
    # head of the queue (depth 1), c waits until it is the head, and a ends at +70.
    cluster = two_nodes(
        [make_pod("r1").job("r1").on("n1").gpus(8), make_pod("r2").job("r2").on("n2").gpus(4)],
        [make_job("a").gpus(8).submitted(30), make_job("b").gpus(8).submitted(20), make_job("c").gpus(4).submitted(10)])
    ends = {"r1": minutes(10), "r2": minutes(40)}
    runs = {"a": timedelta(minutes=60), "b": timedelta(minutes=60), "c": timedelta(minutes=5)}
    everything = estimate_starts(cluster, NOW, ends, runs, WEEK)
    head_only = estimate_starts(cluster, NOW, ends, runs, WEEK, queue_window(lambda queues: 1))
    assert everything.starts == {"a": minutes(10), "b": minutes(40), "c": NOW}
    assert head_only.starts == {"a": minutes(10), "b": minutes(40), "c": minutes(70)}
