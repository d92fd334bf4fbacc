"""Fair sharing of idle capacity: the borrower furthest below its weighted dominant share goes
first, and a reclaim takes from the one furthest above it."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import KIND_IDLE, RunningPod, plan

from .builders import NOW, make_job, make_pod, node, quota, snapshot

TREE = [quota("root"), quota("lender", "root"), quota("a", "root", weight=Decimal(1)),
        quota("b", "root", weight=Decimal(2))]
NODES = [node(f"n{i}", "lender") for i in range(6)]  # 48 GPUs, all idle


def borrowers_run(seed: int, ticks: int) -> dict[str, int]:
    """Two equally hungry borrowers of one-GPU jobs of random length; GPU-ticks each got."""
    rng = random.Random(seed)
    running: list[tuple[int, RunningPod]] = []  # (end tick, pod)
    got = {"a": 0, "b": 0}
    serial = 0
    for tick in range(ticks):
        running = [(end, pod) for end, pod in running if end > tick]
        jobs = [make_job(f"{q}-{serial + k}").quota(q).force().submitted(0).build()
                for q in ("a", "b") for k in range(48)]
        serial += 48
        now = NOW + timedelta(minutes=tick)
        d = plan(snapshot(NODES, TREE, [p for _, p in running], jobs), now)
        by_id = {j.job_id: j for j in jobs}
        for a in d.admissions:
            pl = a.placements[0]
            pod = RunningPod(a.job_id, a.job_id, pl.node, by_id[a.job_id].pods[0].resources,
                             KIND_IDLE, now, a.quota_id, gpu_indices=pl.gpu_indices)
            running.append((tick + rng.randint(1, 20), pod))
        for _, pod in running:
            got[pod.quota_id] += pod.resources.gpu
    return got


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_two_equally_hungry_borrowers_of_weights_1_and_2_get_idle_gpu_time_1_to_2(seed):
    got = borrowers_run(seed, 150)
    assert abs(got["b"] / got["a"] - 2) <= 0.2, got


def test_a_reclaim_takes_first_from_the_borrower_furthest_above_its_weighted_share():
    # Both hold 4 GPUs of the lender's node; a's share counts double (weight 1 against 2), so
    # a's pod goes although it has run longer (more work lost) than b's.
    pods = [make_pod("pa").on("n0").quota("a").idle().gpus(4).started(60),
            make_pod("pb").on("n0").quota("b").idle().gpus(4).started(5)]
    jobs = [make_job("own").quota("lender").gpus(4)]
    d = plan(snapshot(NODES[:1], TREE, pods, jobs), NOW)
    assert d.preempted_pod_ids() == ("pa",)


def test_equal_weights_keep_the_reclaim_order_of_least_work_lost():
    tree = [replace(q, weight=Decimal(1)) for q in TREE]
    pods = [make_pod("pa").on("n0").quota("a").idle().gpus(4).started(60),
            make_pod("pb").on("n0").quota("b").idle().gpus(4).started(5)]
    jobs = [make_job("own").quota("lender").gpus(4)]
    d = plan(snapshot(NODES[:1], tree, pods, jobs), NOW)
    assert d.preempted_pod_ids() == ("pb",)
