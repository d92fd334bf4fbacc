"""Rule 4: a lender takes its capacity back by preempting the fewest idle pods."""

import importlib

import pytest

from scheduler import plan
from scheduler.decisions import HIGHER_PRIORITY, QUOTA_FULL, RECLAIMED, WAITING_FOR_TERMINATION
from scheduler.placement import FailedShapes
from scheduler.preemption import find_victims

from .builders import NOW, make_job, make_pod, node, quota, snapshot

TREE = [quota("root"), quota("q1", "root"), quota("q2", "root"),
        quota("q3", "root", min_runtime_s=3600)]
NODES = [node("n1", "q1"), node("n2", "q2")]


def borrower(pod_id, gpus=2, q="q2"):
    return make_pod(pod_id).on("n1").idle().quota(q).gpus(gpus)


def preempted(pods, job=None, quotas=TREE):
    job = job or make_job("a").gpus(2)
    return plan(snapshot(NODES, quotas, pods, [job]), NOW).preempted_pod_ids()


VICTIM_ORDER_CASES = [
    ("it preempts a borrower before the lender's own idle pod",
     [borrower("own", q="q1"), borrower("other").priority(9)], ("other",)),
    ("it preempts the lower priority borrower first",
     [borrower("low").priority(1), borrower("high").priority(5)], ("low",)),
    ("it preempts the borrower with the newest checkpoint first",
     [borrower("old").checkpoint(50), borrower("new").checkpoint(5)], ("new",)),
    ("it preempts the most recently started borrower when none has a checkpoint",
     [borrower("early").started(50), borrower("late").started(5)], ("late",)),
    ("a checkpoint counts as less work lost than a later start",
     [borrower("ckpt").started(100).checkpoint(1), borrower("fresh").started(10)], ("ckpt",)),
    ("it breaks ties by pod id",
     [borrower("p-b"), borrower("p-a")], ("p-a",)),
]


@pytest.mark.parametrize("name, pods, expected", VICTIM_ORDER_CASES,
                         ids=[c[0] for c in VICTIM_ORDER_CASES])
def test_victim_order(name, pods, expected):
    full = pods + [make_pod("g").on("n1").gpus(8 - 2 * len(pods))]
    assert preempted(full) == expected


def test_it_preempts_the_borrower_whose_whole_job_loses_the_least_gpu_time():
    # A pod of a gang ends its whole job: "gang" would lose 2 pods x 2 GPUs x 5 min = 20 GPU-min,
    # "solo" 2 GPUs x 8 min = 16, though solo started earlier.
    pods = [borrower("gang-0").job("gang").started(5), make_pod("gang-1").job("gang").on("n2").idle().quota("q1")
            .gpus(2).started(5), borrower("solo").job("solo").started(8), make_pod("g").on("n1").gpus(4)]
    assert preempted(pods) == ("solo",)


def test_it_preempts_the_fewest_pods_even_if_they_come_later_in_victim_order():
    pods = [borrower("small", gpus=1).priority(1), borrower("big", gpus=4).priority(5),
            make_pod("g").on("n1").gpus(3)]
    assert preempted(pods, make_job("a").gpus(4)) == ("big",)


def test_it_drops_victims_that_turned_out_unnecessary():
    pods = [borrower("a1", gpus=1).priority(1), borrower("a2", gpus=1).priority(2),
            borrower("b", gpus=2).priority(3), make_pod("g").on("n1").gpus(4)]
    # Needs 2 GPUs: one 2-GPU pod beats two 1-GPU pods.
    assert preempted(pods, make_job("a").gpus(2)) == ("b",)


def test_the_preemption_names_the_quota_and_job_that_reclaimed():
    d = plan(snapshot(NODES, TREE, [borrower("v", gpus=8)], [make_job("a").gpus(2)]), NOW)
    reason = d.preemptions[0].reason
    assert (reason.code, reason.by_quota, reason.by_job) == (RECLAIMED, "q1", "a")
    assert reason.message == "Reclaimed by quota q1 for job a"


def test_preempted_capacity_is_not_free_in_the_same_cycle():
    jobs = [make_job("a").gpus(8), make_job("small").gpus(1).priority(1)]
    d = plan(snapshot(NODES, TREE, [borrower("v", gpus=8)], jobs), NOW)
    assert d.admissions == ()
    w = d.wait_reason("a")
    assert (w.code, w.waiting_for_pods) == (WAITING_FOR_TERMINATION, 1)
    assert w.message == "Waiting for 1 preempted or stopping pod(s) to terminate"


def test_it_preempts_nothing_more_while_victims_are_terminating():
    pods = [borrower("v1", gpus=4).terminating(), borrower("v2", gpus=4)]
    d = plan(snapshot(NODES, TREE, pods, [make_job("a").gpus(4)]), NOW)
    assert d.preemptions == ()
    assert d.wait_reason("a").code == WAITING_FOR_TERMINATION


def test_it_preempts_only_what_is_missing_beyond_terminating_pods():
    pods = [borrower("v1", gpus=4).terminating(), borrower("v2", gpus=2),
            borrower("v3", gpus=2).priority(5)]
    d = plan(snapshot(NODES, TREE, pods, [make_job("a").gpus(6)]), NOW)
    assert d.preempted_pod_ids() == ("v2",)


def test_it_respects_the_borrowers_minimum_runtime():
    pods = [borrower("young", q="q3", gpus=4).started(10), borrower("old", gpus=4)]
    assert preempted(pods, make_job("a").gpus(4)) == ("old",)
    d = plan(snapshot(NODES, TREE, [borrower("young", q="q3", gpus=8).started(10)],
                      [make_job("a").gpus(4)]), NOW)
    assert d.preemptions == ()
    assert "idle jobs hold 8 GPU" in d.wait_reason("a").message


@pytest.mark.parametrize("job", [make_job("b").quota("q2").force().gpus(4),
                                 make_job("b").quota("q2").accept().gpus(4)],
                         ids=["only-idle", "acceptable"])
def test_guaranteed_pods_are_never_preempted_for_an_idle_job(job):
    pods = [make_pod("g1").on("n1").gpus(8).priority(1),
            make_pod("g2").on("n2").quota("q2").gpus(8)]
    d = plan(snapshot(NODES, TREE, pods, [job.priority(9)]), NOW)
    assert d.preemptions == ()


def test_an_acceptable_job_placed_in_quota_is_never_reclaimed():
    # q2's Acceptable pod on q2's node runs In Quota (kind guaranteed): q2's job cannot take it.
    pods = [make_pod("acc").on("n2").quota("q2").gpus(8)]
    d = plan(snapshot(NODES, TREE, pods, [make_job("a").quota("q2").gpus(4).priority(9)]), NOW)
    assert d.preemptions == ()
    assert d.wait_reason("a").code == QUOTA_FULL


@pytest.mark.parametrize("allowed, expected", [(True, ("low",)), (False, ())])
def test_a_higher_priority_job_preempts_within_its_quota_only_when_enabled(allowed, expected):
    tree = [quota("root"), quota("q1", "root", allow_priority_preemption=allowed),
            quota("q2", "root")]
    pods = [make_pod("low").on("n1").gpus(4).priority(1),
            make_pod("same").on("n1").gpus(4).priority(9)]
    d = plan(snapshot(NODES, tree, pods, [make_job("a").gpus(4).priority(9)]), NOW)
    assert d.preempted_pod_ids() == expected
    if allowed:
        reason = d.preemptions[0].reason
        assert reason.code == HIGHER_PRIORITY
        assert reason.message == "Preempted by higher priority job a (priority 9 > 1) in quota q1"


def test_priority_preemption_takes_borrowers_before_own_guaranteed_pods():
    tree = [quota("root"), quota("q1", "root", allow_priority_preemption=True),
            quota("q2", "root")]
    pods = [make_pod("low").on("n1").gpus(4).priority(1), borrower("b", gpus=4).priority(9)]
    d = plan(snapshot(NODES, tree, pods, [make_job("a").gpus(4).priority(9)]), NOW)
    assert d.preempted_pod_ids() == ("b",)


def test_a_gang_reclaims_across_several_nodes():
    tree = [quota("root"), quota("q1", "root"), quota("q2", "root")]
    nodes = [node("n1", "q1"), node("n1b", "q1"), node("n2", "q2")]
    pods = [borrower("v1", gpus=8), make_pod("v2").on("n1b").idle().quota("q2").gpus(8)]
    d = plan(snapshot(nodes, tree, pods, [make_job("a").gpus(8).pods(2)]), NOW)
    assert d.preempted_pod_ids() == ("v1", "v2")
    assert d.wait_reason("a").waiting_for_pods == 2


# The cycle after a reclaim: the victims are gone and the lender's job is still pending.
LENDER_TREE = [quota("root"), quota("a", "root"), quota("b", "root")]
LENDER_NODES = [node("a1", "a"), node("b1", "b")]


@pytest.mark.parametrize("lender", [make_job("lender").quota("a").gpus(8).forbidden(),
                                    make_job("lender").quota("a").gpus(8).accept()],
                         ids=["forbidden", "acceptable"])
@pytest.mark.parametrize("borrower", [make_job("borrower").quota("b").gpus(8).accept(),
                                      make_job("borrower").quota("b").gpus(8).force()],
                         ids=["acceptable", "only-idle"])
def test_the_next_cycle_gives_the_lender_the_capacity_it_reclaimed(lender, borrower):
    # The borrower is first in the fair order (submitted earlier, same priority), but it
    # could only run idle: the lender's In Quota turn comes first, so no reclaim loop.
    pods = [make_pod("b-own").on("b1").quota("b").gpus(8)]
    jobs = [borrower.submitted(60), lender.submitted(1)]
    d = plan(snapshot(LENDER_NODES, LENDER_TREE, pods, jobs), NOW)
    assert (d.admission("lender").kind, d.admission("lender").use_oversold) == \
        ("guaranteed", False)
    assert d.admission("borrower") is None and d.preemptions == ()


def test_the_earlier_borrower_would_be_reclaimed_from_the_lenders_node_again():
    """Why the above matters: with the borrower on a1, the lender preempts it again."""
    pods = [make_pod("b-own").on("b1").quota("b").gpus(8),
            make_pod("borrower-0").job("borrower").on("a1").quota("b").gpus(8).idle()
            .started(0)]
    jobs = [make_job("lender").quota("a").gpus(8).forbidden().submitted(1)]
    d = plan(snapshot(LENDER_NODES, LENDER_TREE, pods, jobs), NOW)
    assert d.preempted_pod_ids() == ("borrower-0",)


def test_an_idle_job_takes_only_what_the_waiting_lender_cannot_use():
    # a1 has 8 free GPUs; the lender needs 6 of them, a higher priority borrower 4: the
    # borrower waits (2 left), a 2-GPU borrower fits beside the lender.
    jobs = [make_job("borrower").quota("b").gpus(4).force().priority(9).submitted(60),
            make_job("small").quota("b").gpus(2).force().priority(9).submitted(50),
            make_job("lender").quota("a").gpus(6).submitted(1)]
    pods = [make_pod("b-own").on("b1").quota("b").gpus(8)]
    d = plan(snapshot(LENDER_NODES, LENDER_TREE, pods, jobs), NOW)
    assert sorted(a.job_id for a in d.admissions) == ["lender", "small"]
    assert d.wait_reason("borrower").code == "no_idle_capacity"


def test_a_lender_waiting_for_its_victims_books_its_guarantee_before_a_later_job_of_its_queue():
    """a owns a1 and a2 (16 GPUs). Its terminating pod (4) and its running pod (4) use 8; the
    lender needs a whole node, so it reclaims the borrower beside the terminating pod on a1.
    The later job of a's BestEffort queue fits a2's 4 free GPUs, but not a's guarantee once the
    lender's 8 are booked. Admitted, it would leave the lender "quota full" next cycle, and the
    GPUs the borrower freed would go to the next borrower (found by
    test_a_lender_gets_what_it_reclaimed_before_any_idle_job)."""
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b")]
    pods = [make_pod("stopping").on("a1").quota("a").gpus(4).terminating(),
            make_pod("borrowed").on("a1").quota("b").gpus(4).idle(),
            make_pod("a-own").on("a2").quota("a").gpus(4),
            make_pod("b-own").on("b1").quota("b").gpus(8)]
    jobs = [make_job("lender").quota("a").gpus(8).submitted(60), make_job("later").quota("a").gpus(4).submitted(30)]
    d = plan(snapshot(nodes, LENDER_TREE, pods, jobs), NOW)
    assert d.preempted_pod_ids() == ("borrowed",) and d.wait_reason("lender").code == WAITING_FOR_TERMINATION
    assert d.admissions == () and d.wait_reason("later").code == QUOTA_FULL
    assert d.wait_reason("later").message == ("Quota a is full: 16 GPU of 16 GPU guaranteed in use (8 GPU of it held "
                                              "for jobs waiting for pods to terminate), this job needs 4 GPU")
    # The next cycle, the borrower gone and the other pod still terminating: the lender holds
    # a1, and a borrower gets only a2's free GPUs, which a's guarantee leaves idle.
    pods = [p for p in pods if p.build().pod_id != "borrowed"]
    jobs.append(make_job("next-borrower").quota("b").gpus(4).force().priority(9))
    after = plan(snapshot(nodes, LENDER_TREE, pods, jobs), NOW)
    assert after.wait_reason("lender").code == WAITING_FOR_TERMINATION and after.preemptions == ()
    assert [(a.job_id, [pl.node for pl in a.placements]) for a in after.admissions] == [("next-borrower", ["a2"])]


def test_an_acceptable_lender_reclaims_before_an_earlier_job_borrows_its_last_free_gpus():
    # a1: 4 free, 4 held by a borrower. The higher priority job of b could borrow the 4 free;
    # the lender fits neither In Quota nor idle, so it reclaims first and keeps them.
    pods = [make_pod("b-own").on("b1").quota("b").gpus(8),
            make_pod("borrowed").on("a1").quota("b").gpus(4).idle()]
    jobs = [make_job("b-job").quota("b").gpus(4).accept().priority(9),
            make_job("lender").quota("a").gpus(8).accept()]
    d = plan(snapshot(LENDER_NODES, LENDER_TREE, pods, jobs), NOW)
    assert d.admissions == () and d.preempted_pod_ids() == ("borrowed",)
    assert d.wait_reason("lender").code == WAITING_FOR_TERMINATION


def test_an_acceptable_lender_waits_for_its_own_terminating_capacity_rather_than_borrow():
    pods = [make_pod("stopping").on("a1").quota("b").gpus(8).idle().terminating()]
    jobs = [make_job("lender").quota("a").gpus(8).accept()]
    d = plan(snapshot(LENDER_NODES, LENDER_TREE, pods, jobs), NOW)  # b1 is free
    assert d.admissions == ()
    assert d.wait_reason("lender").code == WAITING_FOR_TERMINATION


def test_under_priority_preemption_a_job_takes_its_quotas_lower_priority_pods_before_it_borrows():
    """Left to borrow in pass 2, it would leave its quota's free capacity to the lower-priority job
    behind it in pass 1, and preempt that job as soon as borrowing failed (the storms of
    bench/kueue_baseline.py). It preempts its own lower-priority pod and holds its quota's nodes."""
    tree = [quota("root"), quota("q1", "root", allow_priority_preemption=True), quota("q2", "root")]
    pods = [make_pod("low").on("n1").gpus(4).priority(1)]
    jobs = [make_job("high").accept().gpus(8).priority(9).submitted(2),
            make_job("next").accept().gpus(4).priority(1).submitted(1)]
    d = plan(snapshot(NODES, tree, pods, jobs), NOW)  # n2 of q2 is free: "high" could borrow it
    assert d.preempted_pod_ids() == ("low",) and d.wait_reason("high").code == WAITING_FOR_TERMINATION
    assert "n1" not in {pl.node for a in d.admissions for pl in a.placements}  # the node "high" holds


def test_without_priority_preemption_an_acceptable_job_still_borrows_before_it_waits():
    tree = [quota("root"), quota("q1", "root"), quota("q2", "root")]
    pods = [make_pod("low").on("n1").gpus(4).priority(1)]
    d = plan(snapshot(NODES, tree, pods, [make_job("high").accept().gpus(8).priority(9)]), NOW)
    assert d.preempted_pod_ids() == () and d.admission("high").kind == "idle"


def test_a_victim_search_that_failed_is_not_repeated_for_a_lower_priority_job(monkeypatch):
    # A lower priority may preempt a subset of what a higher one may, so its search fails too.
    plan_module = importlib.import_module("scheduler.plan")
    searches = []

    def counted(view, scope, requests, candidates):
        searches.append(requests)
        return find_victims(view, scope, requests, candidates)

    monkeypatch.setattr(plan_module, "find_victims", counted)
    tree = [quota("root"), quota("q1", "root", allow_priority_preemption=True), quota("q2", "root")]
    pods = [make_pod("p5").on("n1").gpus(4).priority(5),
            make_pod("p9").on("n1").gpus(4).priority(9)]
    jobs = [make_job("high").gpus(8).priority(5).forbidden(),
            make_job("low").gpus(8).priority(3).forbidden()]
    d = plan(snapshot(NODES, tree, pods, jobs), NOW)
    assert d.preemptions == ()
    assert [d.wait_reason(j).code for j in ("high", "low")] == [QUOTA_FULL, QUOTA_FULL]
    assert len(searches) == 1


def test_failed_shapes_rank_a_failure_for_every_lower_rank_and_larger_gang():
    key = ("scope", "victims", "reclaim")
    failed = FailedShapes()
    four = (("A100", (4, 32000, 262144)),)
    failed.add(key, four, rank=5)
    assert failed.known(key, four, rank=5) and failed.known(key, four, rank=1)
    assert failed.known(key, four * 2, rank=3)  # more pods of the same size
    assert not failed.known(key, four, rank=6)  # more candidates: it may fit
    assert not failed.known(key, (("A100", (2, 16000, 131072)),), rank=1)  # smaller pods
    assert not failed.known(("other",), four, rank=1)
    mixed = four + (("A100", (1, 8000, 65536)),)
    failed.add(key, mixed, rank=2)
    assert failed.known(key, mixed, rank=2) and not failed.known(key, mixed, rank=4)
