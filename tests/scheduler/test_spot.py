"""Rule 7: spot jobs bid for the public pool; pay-as-you-go takes inventory first."""

from decimal import Decimal

import pytest

from scheduler import LINGJUN, plan
from scheduler.decisions import BID_BELOW_PRICE, NO_STOCK, OUTBID, STOCK_SHORT
from scheduler.spot import stock_status

from .builders import NOW, make_job, make_pod, market, node, snapshot

POOL = [node("s1"), node("s2")]


def spot_pod(pod_id, bid, node_name="s1", gpus=8, protected=0):
    return make_pod(pod_id).on(node_name).gpus(gpus).spot(bid, protected).job(pod_id)


def test_it_admits_a_spot_job_whose_bid_meets_the_market_price():
    d = plan(snapshot(POOL, jobs=[make_job("a").spot("1.00").gpus(8)],
                      markets=[market("1.00")]), NOW)
    a = d.admission("a")
    assert (a.kind, a.quota_id, a.use_oversold) == ("spot", None, False)


def test_it_rejects_a_bid_below_the_market_price():
    d = plan(snapshot(POOL, jobs=[make_job("a").spot("0.50").gpus(8)],
                      markets=[market("0.80")]), NOW)
    w = d.wait_reason("a")
    assert (w.status, w.code, w.queue) == ("Bidding", BID_BELOW_PRICE, "spot:ecs.gn7-8xA100")
    assert w.message == "bid 30.0000 /h is below the market price 48.0000 /h of ecs.gn7-8xA100"


def test_a_spot_job_without_stock_keeps_bidding():
    pods = [make_pod("p").on("s1").payg().gpus(8), make_pod("q").on("s2").payg().gpus(8)]
    d = plan(snapshot(POOL, pods=pods, jobs=[make_job("a").spot("1").gpus(2)],
                      markets=[market("0.5")]), NOW)
    w = d.wait_reason("a")
    assert (w.status, w.code) == ("Bidding", NO_STOCK)
    assert "0 GPU free of 16 GPU, this job needs 2 GPU" in w.message


def test_spot_jobs_never_use_quota_nodes():
    nodes = [node("n1", "q1")]
    d = plan(snapshot(nodes, jobs=[make_job("a").spot("1").gpus(1)],
                      markets=[market("0.5")]), NOW)
    assert d.wait_reason("a").code == NO_STOCK


def test_the_highest_bid_gets_the_last_stock():
    # Three nodes, one busy: one node is for sale, the other is the pay-as-you-go reserve.
    jobs = [make_job("low").spot("0.6").gpus(8).submitted(100),
            make_job("high").spot("0.9").gpus(8).submitted(1)]
    d = plan(snapshot([node("s1"), node("s2"), node("s3")],
                      pods=[make_pod("p").on("s1").payg().gpus(8)], jobs=jobs,
                      markets=[market("0.5")]), NOW)
    assert [a.job_id for a in d.admissions] == ["high"]
    assert d.wait_reason("low").code == NO_STOCK


@pytest.mark.parametrize("resource_type, price, avg, bid, released", [
    ("ECS", "0.80", "0.50", "0.70", True),      # ECS: below the current price
    ("ECS", "0.60", "0.90", "0.70", False),     # ECS: the average does not matter
    (LINGJUN, "0.80", "0.50", "0.70", False),   # Lingjun: above the hour's average
    (LINGJUN, "0.60", "0.90", "0.70", True),    # Lingjun: below the hour's average
    ("ECS", "0.70", "0.50", "0.70", False),     # a bid equal to the price holds
    (LINGJUN, "0.90", "0.70", "0.70", False),   # a bid equal to the average holds
])
def test_it_releases_an_outbid_spot_pod(resource_type, price, avg, bid, released):
    d = plan(snapshot(POOL, pods=[spot_pod("p", bid)],
                      markets=[market(price, avg, resource_type=resource_type)]), NOW)
    assert d.preempted_pod_ids() == (("p",) if released else ())
    if released:
        reason = d.preemptions[0].reason
        assert (reason.code, str(reason.bid)) == (OUTBID, bid)
        assert reason.message.startswith(f"Outbid: bid {Decimal(bid) * 60:.4f} /h is below the ")


def test_it_releases_every_pod_of_an_outbid_job_together():
    pods = [spot_pod("p1", "0.5").job("j"), spot_pod("p2", "0.5", "s2").job("j")]
    d = plan(snapshot(POOL, pods=pods, markets=[market("0.8")]), NOW)
    assert d.preempted_pod_ids() == ("p1", "p2")


def test_it_never_releases_a_spot_pod_inside_its_protection_period():
    pods = [spot_pod("p", "0.1", protected=30), spot_pod("q", "0.1", "s2", protected=30)]
    jobs = [make_job("payg").payg().gpus(8)]
    d = plan(snapshot(POOL, pods=pods, jobs=jobs, markets=[market("0.9")]), NOW)
    assert d.preemptions == ()
    assert d.wait_reason("payg").code == NO_STOCK


def test_pay_as_you_go_releases_the_lowest_bid_spot_pod_for_stock():
    pods = [spot_pod("rich", "0.9"), spot_pod("poor", "0.6", "s2")]
    d = plan(snapshot(POOL, pods=pods, jobs=[make_job("p").payg().gpus(8)],
                      markets=[market("0.5")]), NOW)
    assert d.preempted_pod_ids() == ("poor",)
    reason = d.preemptions[0].reason
    assert (reason.code, reason.by_job) == (STOCK_SHORT, "p")
    assert d.wait_reason("p").code == "waiting_for_termination"


def test_pay_as_you_go_takes_inventory_before_spot_in_the_same_cycle():
    jobs = [make_job("spot").spot("0.9").gpus(8).priority(9).submitted(100),
            make_job("payg").payg().gpus(8).submitted(1)]
    d = plan(snapshot([node("s1")], jobs=jobs, markets=[market("0.5")]), NOW)
    assert [a.job_id for a in d.admissions] == ["payg"]
    assert d.admission("payg").kind == "payg"
    assert d.wait_reason("spot").code == NO_STOCK


def test_spot_market_missing_means_no_stock():
    d = plan(snapshot(POOL, jobs=[make_job("a").spot("1").gpus(1)]), NOW)
    w = d.wait_reason("a")
    assert (w.code, w.message) == (NO_STOCK, "no spot market for instance type ecs.gn7-8xA100")


# ---- the pay-as-you-go reserve: SpotStockStatus, in whole free nodes of the pool -------------

def pool(nodes: int):
    return [node(f"s{i}") for i in range(1, nodes + 1)]


def payg_pods(count: int):
    return [make_pod(f"payg{i}").on(f"s{i}").payg().gpus(8) for i in range(1, count + 1)]


@pytest.mark.parametrize("nodes, busy, asked, admitted", [
    (4, 2, 1, True),    # 2 free, 1 asked: 1 left = the reserve (ceil 10 % of 4)
    (4, 3, 1, False),   # the last free node is the reserve: ClosedWithStock
    (4, 2, 2, False),   # 2 free but 2 asked would leave none
    (10, 8, 1, True),   # reserve 1 of 10
    (30, 25, 2, True),  # reserve 3 of 30 (not 4: 0.1 x 30 in floats is 3.0000000000000004)
    (30, 25, 3, False),
    (1, 0, 1, False),   # a pool of one node keeps it for pay-as-you-go
])
def test_a_spot_job_is_admitted_only_when_it_leaves_the_pay_as_you_go_reserve_free(
        nodes, busy, asked, admitted):
    d = plan(snapshot(pool(nodes), pods=payg_pods(busy),
                      jobs=[make_job("a").spot("0.9").gpus(8).pods(asked)],
                      markets=[market("0.5")]), NOW)
    assert (d.admission("a") is not None) == admitted
    if not admitted:
        w = d.wait_reason("a")
        assert (w.status, w.code) == ("Bidding", NO_STOCK)
        assert "kept for pay-as-you-go" in w.message


def test_the_reserve_closed_wait_reason_gives_the_numbers():
    d = plan(snapshot(pool(4), pods=payg_pods(3), jobs=[make_job("a").spot("0.9").gpus(8)],
                      markets=[market("0.5")]), NOW)
    assert d.wait_reason("a").message == (
        "No stock for spot in the public pool of ecs.gn7-8xA100 (ClosedWithStock): 1 of 4 nodes "
        "free, 1 kept for pay-as-you-go; this job needs 1 node")


def test_pay_as_you_go_takes_the_reserve_that_spot_may_not():
    jobs = [make_job("spot").spot("0.9").gpus(8).submitted(100), make_job("payg").payg().gpus(8)]
    d = plan(snapshot(pool(4), pods=payg_pods(3), jobs=jobs, markets=[market("0.5")]), NOW)
    assert [a.job_id for a in d.admissions] == ["payg"]
    assert d.wait_reason("spot").code == NO_STOCK


def test_running_spot_is_never_released_to_refill_the_reserve():
    pods = payg_pods(2) + [spot_pod("sp", "0.9", "s3"), spot_pod("sq", "0.9", "s4")]
    d = plan(snapshot(pool(4), pods=pods, markets=[market("0.5")]), NOW)
    assert d.preemptions == ()


def test_a_node_held_in_part_is_no_stock_for_an_instance():
    # Two nodes, one of them with 4 of its 8 GPUs held: one whole node is free, and that one is
    # the reserve, although 12 of 16 GPUs are free.
    pods = [make_pod("half").on("s1").payg().gpus(4)]
    d = plan(snapshot(pool(2), pods=pods, jobs=[make_job("a").spot("0.9").gpus(8)],
                      markets=[market("0.5")]), NOW)
    assert d.wait_reason("a").code == NO_STOCK


@pytest.mark.parametrize("nodes, free, requested, status", [
    (20, 20, 1, "WithStock"),
    (20, 5, 3, "WithStock"),         # 2 left = the reserve
    (20, 5, 4, "ClosedWithStock"),   # 1 left < the reserve
    (20, 2, 1, "ClosedWithStock"),   # the last nodes exist but are kept for pay-as-you-go
    (20, 0, 1, "WithoutStock"),
    (20, 5, 6, "WithoutStock"),
    (3, 3, 2, "WithStock"),          # a reserve of 0.3 node rounds up to 1
    (3, 3, 3, "ClosedWithStock"),
    (0, 0, 1, "WithoutStock"),       # no Ready node
])
def test_stock_status_follows_whole_free_nodes_and_the_reserve(nodes, free, requested, status):
    assert stock_status(nodes, free, requested) == status
