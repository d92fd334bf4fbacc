"""Rules 1-3: guaranteed jobs stay in their quota, idle jobs borrow within the lending scope."""

import pytest

from scheduler import LINGJUN, plan
from scheduler.decisions import (
    NEVER_FITS, NO_IDLE_CAPACITY, PARENT_QUOTA_FULL, QUOTA_FULL, UNKNOWN_QUOTA,
)

from .builders import NOW, make_job, make_pod, node, quota, snapshot

TREE = [quota("root"), quota("q1", "root"), quota("q2", "root"), quota("other")]
NODES = [node("n1", "q1"), node("n2", "q2"), node("n3", "other")]


def nodes_of(decisions, job_id):
    return sorted(p.node for p in decisions.admission(job_id).placements)


def test_a_guaranteed_job_runs_in_quota_on_its_own_nodes():
    d = plan(snapshot(NODES, TREE, jobs=[make_job("a").gpus(8)]), NOW)
    a = d.admission("a")
    assert (a.kind, a.use_oversold, nodes_of(d, "a")) == ("guaranteed", False, ["n1"])
    assert a.placements[0].gpu_indices == tuple(range(8))


def test_a_guaranteed_job_waits_rather_than_use_another_quotas_nodes():
    pods = [make_pod("p1").on("n1").gpus(6)]
    d = plan(snapshot(NODES, TREE, pods, [make_job("a").gpus(4)]), NOW)
    assert d.admission("a") is None
    w = d.wait_reason("a")
    assert w.code == QUOTA_FULL
    assert w.message == ("Quota q1 is full: 6 GPU of 8 GPU guaranteed in use, "
                         "this job needs 4 GPU")
    assert (w.queue, w.position, w.status) == ("quota:q1", 1, "Queuing")


def test_a_parent_quota_job_may_use_its_sub_quota_nodes():
    d = plan(snapshot(NODES, TREE, jobs=[make_job("a").quota("root").gpus(8).pods(2)]), NOW)
    assert nodes_of(d, "a") == ["n1", "n2"]


def test_it_names_the_parent_quota_when_the_parent_is_full():
    # The parent's own job holds 6 GPUs of q1's node; q1 itself uses 0 of 8.
    tree = [quota("root"), quota("q1", "root")]
    pods = [make_pod("p1").on("n1").quota("root").gpus(6)]
    d = plan(snapshot([node("n1", "q1")], tree, pods, [make_job("a").gpus(4)]), NOW)
    w = d.wait_reason("a")
    assert w.code == PARENT_QUOTA_FULL
    assert "Parent quota root is full: 6 GPU of 8 GPU" in w.message


def test_a_pod_larger_than_every_node_never_fits():
    d = plan(snapshot(NODES, TREE, jobs=[make_job("a").gpus(8).pods(1).force()]), NOW)
    assert d.admission("a") is not None
    d = plan(snapshot(NODES, TREE, jobs=[make_job("a").quota("root").gpus(16)]), NOW)
    assert d.wait_reason("a").code in (NEVER_FITS, QUOTA_FULL)


def test_a_job_of_an_unknown_quota_waits_and_says_so():
    d = plan(snapshot(NODES, TREE, jobs=[make_job("a").quota("nope")]), NOW)
    assert d.wait_reason("a").code == UNKNOWN_QUOTA


@pytest.mark.parametrize("case", [
    # (name, job, expected nodes or None)
    ("only-idle borrows a sibling quota's node", make_job("a").force().gpus(8).pods(2),
     ["n1", "n2"]),
    ("only-idle may use its own quota's free node", make_job("a").force().gpus(8), ["n1"]),
    ("only-idle never borrows outside its root tree", make_job("a").force().gpus(8).pods(3),
     None),
], ids=lambda c: c[0])
def test_idle_jobs_borrow_within_the_ecs_root_tree(case):
    _, job, expected = case
    d = plan(snapshot(NODES, TREE, jobs=[job]), NOW)
    if expected is None:
        assert d.admission("a") is None
        assert d.wait_reason("a").code == NO_IDLE_CAPACITY
        assert "16 GPU free of 16 GPU, this job needs 24 GPU" in d.wait_reason("a").message
    else:
        a = d.admission("a")
        assert (a.kind, a.use_oversold, nodes_of(d, "a")) == ("idle", True, expected)


def test_lingjun_idle_jobs_borrow_from_every_quota_of_the_tenant_with_the_same_type():
    quotas = [quota("l1", resource_type=LINGJUN), quota("l2", resource_type=LINGJUN),
              quota("l3", resource_type=LINGJUN, tenant="globex"),
              quota("l4", resource_type=LINGJUN)]
    nodes = [node("a1", "l1", itype="lingjun-h800"), node("a2", "l2", itype="lingjun-h800"),
             node("a3", "l3", itype="lingjun-h800"), node("a4", "l4", itype="lingjun-a10")]
    job = make_job("a").quota("l1").force().gpus(8).pods(2)
    d = plan(snapshot(nodes, quotas, jobs=[job]), NOW)
    assert nodes_of(d, "a") == ["a1", "a2"]
    d = plan(snapshot(nodes, quotas, jobs=[job.pods(3)]), NOW)
    assert d.admission("a") is None  # a3: another tenant, a4: another instance type


def test_a_forbidden_job_never_borrows():
    pods = [make_pod("p1").on("n1").gpus(8)]
    d = plan(snapshot(NODES, TREE, pods, [make_job("a").gpus(4)]), NOW)
    assert d.admission("a") is None


@pytest.mark.parametrize("q1_used, expected_kind, expected_node, oversold", [
    (0, "guaranteed", "n1", False),   # own quota has room: In Quota, even though idle fits too
    (6, "idle", "n2", True),          # own quota full: Not in Quota on the sibling's node
])
def test_an_acceptable_job_prefers_its_own_quota(q1_used, expected_kind, expected_node,
                                                 oversold):
    pods = [make_pod("p1").on("n1").gpus(q1_used)] if q1_used else []
    d = plan(snapshot(NODES, TREE, pods, [make_job("a").accept().gpus(4)]), NOW)
    a = d.admission("a")
    assert (a.kind, a.placements[0].node, a.use_oversold) == (expected_kind, expected_node,
                                                              oversold)


def test_an_acceptable_job_that_fits_nowhere_explains_both_sides():
    pods = [make_pod("p1").on("n1").gpus(8), make_pod("p2").on("n2").quota("q2").gpus(8)]
    d = plan(snapshot(NODES, TREE, pods, [make_job("a").accept().gpus(4)]), NOW)
    msg = d.wait_reason("a").message
    assert msg.startswith("In quota: Quota q1 is full: 8 GPU of 8 GPU")
    assert "Not in quota: No idle capacity in quota tree root: 0 GPU free of 16 GPU" in msg


def test_a_node_that_is_not_ready_takes_no_pods():
    nodes = [node("n1", "q1", ready=False), node("n2", "q2")]
    d = plan(snapshot(nodes, TREE, jobs=[make_job("a").gpus(1)]), NOW)
    assert d.admission("a") is None
