"""Elastic jobs (scheduler/elastic.py): start at MinParallelism, grow toward MaxParallelism into
capacity nobody waits for, and shrink before any job is taken whole."""

from scheduler import KIND_GUARANTEED, KIND_IDLE, PodRequest, plan
from scheduler.decisions import RECLAIMED
from scheduler.model import ElasticJob

from .builders import NOW, make_job, make_pod, node, per_gpu, quota, snapshot

TREE = [quota("root"), quota("q1", "root"), quota("q2", "root")]
NODES = [node("n1", "q1"), node("n2", "q2")]


def lender_uses(gpus, on="n1", q="q1"):
    return make_pod(f"own-{on}").on(on).quota(q).gpus(gpus)


def borrower(pod_id, job, gpus=1):
    return make_pod(pod_id).job(job).on("n1").idle().quota("q2").gpus(gpus)


def workers(job_id, count, gpus=2, start=0):
    return tuple(PodRequest("worker", i, per_gpu(gpus)) for i in range(start, start + count))


# ---- admission ---------------------------------------------------------------------------------

def test_an_elastic_job_starts_as_soon_as_its_minimum_fits():
    busy = [lender_uses(4), lender_uses(8, on="n2", q="q2")]  # 4 GPU free, on n1
    job = make_job("e").quota("q2").force().gpus(2).pods(4)
    gang = plan(snapshot(NODES, TREE, busy, [job]), NOW)
    elastic = plan(snapshot(NODES, TREE, busy, [job.elastic(2)]), NOW)
    assert gang.admissions == () and gang.wait_reason("e") is not None
    placed = elastic.admission("e").placements
    assert [(p.role, p.index, p.node) for p in placed] == [("worker", 0, "n1"), ("worker", 1, "n1")]


def test_an_elastic_job_takes_every_pod_up_to_its_maximum_that_fits():
    d = plan(snapshot(NODES, TREE, [lender_uses(8, on="n2", q="q2")],
                      [make_job("e").quota("q2").force().gpus(2).pods(6).elastic(1)]), NOW)
    assert len(d.admission("e").placements) == 4  # n1's 8 GPU: 4 pods of 2


def test_an_elastic_job_in_quota_grows_only_within_its_guarantee():
    tree = [quota("root"), quota("q1", "root"), quota("q2", "root")]
    nodes = [node("n1", "q1"), node("n2", "q2", gpus=4), node("n3")]
    d = plan(snapshot(nodes, tree, [], [make_job("e").quota("q2").gpus(2).pods(4).elastic(1)]), NOW)
    a = d.admission("e")
    assert (a.kind, len(a.placements)) == (KIND_GUARANTEED, 2)


# ---- shrink ------------------------------------------------------------------------------------

def shrinking_cluster():
    """n1 (q1's) full of q2's borrowers: one whole 4-GPU job, two elastic jobs of 2 workers each,
    one of them above the minimum."""
    return [borrower("w", "whole", 4),
            borrower("e1-0", "e1"), borrower("e1-1", "e1").spare(),
            borrower("e2-0", "e2"), borrower("e2-1", "e2").spare()]


def test_a_reclaim_shrinks_several_elastic_jobs_before_it_takes_any_job_whole():
    # The fewest victims would be the one 4-GPU pod; two spare pods shrink two jobs instead.
    d = plan(snapshot(NODES, TREE, shrinking_cluster(), [make_job("a").gpus(2)]), NOW)
    assert d.preempted_pod_ids() == ("e1-1", "e2-1")
    assert [(s.job_id, s.workers_from, s.workers_to) for s in d.shrinks] == [("e1", 2, 1), ("e2", 2, 1)]


def test_a_shrink_says_from_how_many_workers_to_how_many_and_who_reclaimed():
    d = plan(snapshot(NODES, TREE, shrinking_cluster(), [make_job("a").gpus(2)]), NOW)
    reason = d.preemptions[0].reason
    assert reason.code == RECLAIMED and reason.by_quota == "q1"
    assert reason.message == "Shrunk from 2 to 1 workers: reclaimed by quota q1 for job a"
    assert d.shrinks[0].message == reason.message


def test_when_spare_pods_are_not_enough_a_whole_job_is_taken_as_before():
    d = plan(snapshot(NODES, TREE, shrinking_cluster(), [make_job("a").gpus(4)]), NOW)
    assert d.preempted_pod_ids() == ("w",)
    assert d.shrinks == ()
    assert d.preemptions[0].reason.message == "Reclaimed by quota q1 for job a"


def test_a_job_that_loses_a_pod_within_its_minimum_ends_whole_and_is_not_called_shrunk():
    pods = [borrower("e-0", "e", 4), borrower("e-1", "e", 4).spare()]
    d = plan(snapshot(NODES, TREE, pods, [make_job("a").gpus(8)]), NOW)
    assert d.preempted_pod_ids() == ("e-0", "e-1")
    assert d.shrinks == ()
    assert {p.reason.message for p in d.preemptions} == {"Reclaimed by quota q1 for job a"}


# ---- growth ------------------------------------------------------------------------------------

def running_elastic(workers_now=2, more=2, kind=KIND_IDLE):
    return ElasticJob("e", "q2", kind, workers_now, workers("e", more, start=workers_now))


def test_a_running_elastic_job_grows_into_idle_capacity():
    busy = [lender_uses(6), lender_uses(8, on="n2", q="q2")]  # 2 GPU free on n1
    d = plan(snapshot(NODES, TREE, busy, elastic=[running_elastic()]), NOW)
    (g,) = d.growths
    assert (g.job_id, g.kind, g.workers_from, g.workers_to) == ("e", KIND_IDLE, 2, 3)
    assert [(p.role, p.index, p.node) for p in g.placements] == [("worker", 2, "n1")]


def test_growth_and_admissions_never_book_the_same_gpu():
    busy = [lender_uses(4), lender_uses(8, on="n2", q="q2")]
    d = plan(snapshot(NODES, TREE, busy, [make_job("x").quota("q2").force().gpus(2)],
                      elastic=[running_elastic()]), NOW)
    ids = [i for a in d.admissions for p in a.placements for i in p.gpu_indices]
    ids += [i for g in d.growths for p in g.placements for i in p.gpu_indices]
    assert len(ids) == 4 and len(set(ids)) == 4


def test_no_growth_while_a_job_waits_for_that_capacity():
    busy = [lender_uses(4), lender_uses(8, on="n2", q="q2")]
    waiting = make_job("big").quota("q2").force().gpus(8)  # 4 GPU free: it waits for more
    d = plan(snapshot(NODES, TREE, busy, [waiting], elastic=[running_elastic()]), NOW)
    assert d.wait_reason("big") is not None
    assert d.growths == ()


def test_a_job_that_cannot_use_free_capacity_does_not_stop_growth():
    busy = [lender_uses(4), lender_uses(8, on="n2", q="q2")]
    full = make_job("full").quota("q2").forbidden().gpus(2)  # q2's guarantee is used up
    d = plan(snapshot(NODES, TREE, busy, [full], elastic=[running_elastic()]), NOW)
    assert d.wait_reason("full").code == "quota_full"
    assert [g.workers_to for g in d.growths] == [4]


def test_an_in_quota_elastic_job_grows_only_within_its_guarantee_on_its_own_nodes():
    nodes = [node("n1", "q1"), node("n2", "q2")]
    pods = [make_pod("e-0").job("e").on("n2").quota("q2").gpus(2),
            make_pod("e-1").job("e").on("n2").quota("q2").gpus(2)]
    d = plan(snapshot(nodes, TREE, pods, elastic=[running_elastic(more=6, kind=KIND_GUARANTEED)]), NOW)
    (g,) = d.growths
    assert (g.workers_to, {p.node for p in g.placements}) == (4, {"n2"})
