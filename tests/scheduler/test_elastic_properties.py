"""Invariants of plan() over random snapshots with elastic jobs, spare pods and growable jobs."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import PodRequest, Resources, Snapshot, plan
from scheduler.model import ElasticJob
from scheduler.quota_tree import QuotaTree

from .builders import NOW
from .test_properties import res, snapshots

SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def elastic_snapshots(draw):
    snap = draw(snapshots())
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    jobs = tuple(replace(j, min_pods=rng.randint(1, len(j.pods))) if rng.random() < 0.5 else j
                 for j in snap.jobs)
    pods = tuple(replace(p, spare=True) if p.kind in ("idle", "guaranteed") and rng.random() < 0.4
                 else p for p in snap.pods)
    growable = []
    for job_id in sorted({p.job_id for p in pods if p.kind in ("idle", "guaranteed")}):
        if rng.random() < 0.5:
            first = next(p for p in pods if p.job_id == job_id)
            more = tuple(PodRequest("worker", 100 + i, res(rng.choice((0, 1, 2))))
                         for i in range(rng.randint(1, 3)))
            growable.append(ElasticJob(job_id, first.quota_id, first.kind, 1, more))
    return Snapshot(snap.nodes, snap.quotas, pods, jobs, snap.markets, tuple(growable))


def used_after(snap, d):
    used = defaultdict(Resources)
    gpu_ids = defaultdict(list)
    for pod in snap.pods:
        used[pod.node] += pod.resources
        gpu_ids[pod.node] += pod.gpu_indices
    requests = {j.job_id: j.pods for j in snap.jobs}
    requests.update({e.job_id: e.pods for e in snap.elastic})
    for a in d.admissions + d.growths:
        req = {(p.role, p.index): p for p in requests[a.job_id]}
        for pl in a.placements:
            used[pl.node] += req[(pl.role, pl.index)].resources
            gpu_ids[pl.node] += pl.gpu_indices
    return used, gpu_ids


@SETTINGS
@given(elastic_snapshots())
def test_no_node_is_over_allocated_with_growths_and_wider_admissions(snap):
    used, gpu_ids = used_after(snap, plan(snap, NOW))
    for n in snap.nodes:
        assert used[n.name].fits(n.capacity)
        assert len(gpu_ids[n.name]) == len(set(gpu_ids[n.name]))


@SETTINGS
@given(elastic_snapshots())
def test_an_elastic_job_starts_with_at_least_its_minimum_pods_in_order(snap):
    d = plan(snap, NOW)
    jobs = {j.job_id: j for j in snap.jobs}
    for a in d.admissions:
        job = jobs[a.job_id]
        placed = sorted((p.role, p.index) for p in a.placements)
        count = len(placed)
        assert count >= (job.min_pods or len(job.pods))
        assert placed == sorted((p.role, p.index) for p in job.pods[:count])


@SETTINGS
@given(elastic_snapshots())
def test_no_quota_exceeds_its_guarantee_with_growths(snap):
    d = plan(snap, NOW)
    tree = QuotaTree(snap.quotas, snap.nodes)
    tree.count_running(snap.pods)
    requests = {j.job_id: j.pods for j in snap.jobs}
    requests.update({e.job_id: e.pods for e in snap.elastic})
    for a in d.admissions + d.growths:
        if a.kind == "guaranteed":
            req = {(p.role, p.index): p.resources for p in requests[a.job_id]}
            tree.add_usage(a.quota_id, sum((req[(p.role, p.index)] for p in a.placements),
                                           Resources()))
    for qid in tree.quotas:
        assert tree.usage[qid].fits(tree.guarantee[qid])


@SETTINGS
@given(elastic_snapshots())
def test_a_shrink_takes_only_spare_pods_and_counts_them(snap):
    d = plan(snap, NOW)
    pods = {p.pod_id: p for p in snap.pods}
    for s in d.shrinks:
        taken = [p for p in d.preemptions if p.job_id == s.job_id]
        assert taken and all(pods[p.pod_id].spare for p in taken)
        assert s.workers_from - s.workers_to == len(taken)
        assert all(p.reason.message.startswith(f"Shrunk from {s.workers_from} to {s.workers_to}")
                   for p in taken)
