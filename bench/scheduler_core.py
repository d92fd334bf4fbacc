"""Benchmark: time of one plan() cycle on seeded, realistic snapshots.

Run by hand:  python bench/scheduler_core.py [--scales 1,2,4] [--repeat 3] [--seed 7] [--backfill off]
Scale 1 = 1,000 nodes, 100 quotas, 10,000 pending jobs (and about 1,500 running pods); scale k
has k times as many of each, its quota trees the same ten kinds k times over (so a larger scale
is more of the same work, not a different mix). Prints wall-clock seconds (best and median of
--repeat runs), the best CPU seconds, which are steadier on a shared machine, and the growth
exponent of CPU time with scale (1.0 = linear), beside the machine's reference loop.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import reference_loop_s, speed  # noqa: E402

from scheduler import (  # noqa: E402
    ACCEPT, FORBIDDEN, FORCE, LINGJUN, MarketState, Node, PendingJob, PodRequest, Quota, Resources,
    RunningPod, Snapshot, plan,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
# (instance type, vCPU, GiB, resource type) of 8-GPU nodes.
SPECS = [("ecs.gn7-8xA100", 96, 768, "ECS"), ("ecs.gn6e-8xV100", 64, 512, "ECS"),
         ("ecs.gn7i-8xA10", 128, 752, "ECS"), ("lingjun.8xH800", 128, 1536, LINGJUN)]


def per_gpu(spec, gpus: int) -> Resources:
    _, cpu, mem, _ = spec
    return Resources(gpus, gpus * cpu * 1000 // 8, gpus * mem * 1024 // 8)


def make_snapshot(scale: int, seed: int) -> Snapshot:
    rng = random.Random(seed)
    quotas, leaves = make_quotas(seed, 100 * scale)
    nodes = make_nodes(rng, 1000 * scale, leaves)
    pods = make_pods(rng, nodes, quotas)
    jobs = make_jobs(rng, 10_000 * scale, leaves)
    markets = tuple(MarketState(t, Decimal("0.50"), Decimal("0.45"), rt) for t, _, _, rt in SPECS)
    return Snapshot(tuple(nodes), tuple(quotas), tuple(pods), tuple(jobs), markets)


def make_quotas(seed: int, count: int):
    """Root quotas of ten each: one root and nine leaves; a third of the trees are Lingjun.

    Tree r is drawn as tree r % 10 is: at 1x the ten trees' mix of queue strategies and
    preemption settings was a sample that differed from 4x's (seed 7: 42 % StrictFIFO leaves
    against 32 %), so the growth measured part workload, not scale."""
    quotas, leaves = [], []
    for r in range(count // 10):
        rng = random.Random(seed * 1000 + r % 10)
        spec = rng.choice(SPECS)
        rtype = spec[3]
        tenant = f"tenant{r % 7}"
        quotas.append(Quota(f"root{r}", tenant, None, rtype))
        for c in range(9):
            leaf = Quota(f"root{r}-q{c}", tenant, f"root{r}", rtype,
                         rng.choice(("BestEffort", "BestEffort", "StrictFIFO")),
                         rng.random() < 0.3, rng.choice((0, 0, 1800)))
            quotas.append(leaf)
            leaves.append((leaf, spec))
    return quotas, leaves


def make_nodes(rng, count: int, leaves):
    nodes = []
    for i in range(count):
        if rng.random() < 0.15:  # the public pool
            spec = rng.choice(SPECS)
            nodes.append(Node(f"node{i:05d}", spec[0], per_gpu(spec, 8)))
        else:
            leaf, spec = rng.choice(leaves)
            nodes.append(Node(f"node{i:05d}", spec[0], per_gpu(spec, 8), leaf.id))
    return nodes


def make_pods(rng, nodes, quotas):
    by_id = {q.id: q for q in quotas}
    spec_of = {s[0]: s for s in SPECS}
    pods = []
    for node in nodes:
        free = 8
        while free and rng.random() < 0.7:
            gpus = rng.choice([g for g in (1, 2, 4, 8) if g <= free])
            pods.append(running_pod(rng, len(pods), node, 8 - free, gpus, spec_of, by_id))
            free -= gpus
    return pods


def running_pod(rng, n, node, first_gpu, gpus, spec_of, by_id):
    kind = ("spot" if rng.random() < 0.6 else "payg") if node.quota_id is None else \
        ("idle" if rng.random() < 0.25 else "guaranteed")
    quota_id = None if node.quota_id is None else (
        node.quota_id if kind == "guaranteed" else
        f"{by_id[node.quota_id].parent_id}-q{rng.randrange(9)}")
    started = NOW - timedelta(minutes=rng.randint(1, 600))
    return RunningPod(
        f"pod{n:06d}", f"run{n // 2:06d}", node.name, per_gpu(spec_of[node.instance_type], gpus),
        kind, started, quota_id, rng.randint(1, 9), tuple(range(first_gpu, first_gpu + gpus)),
        started + timedelta(minutes=1) if rng.random() < 0.5 else None,
        rng.random() < 0.03, Decimal(rng.randint(3, 9)) / 10 if kind == "spot" else None,
        NOW + timedelta(minutes=20) if kind == "spot" and rng.random() < 0.3 else None)


def make_jobs(rng, count: int, leaves):
    jobs = []
    for j in range(count):
        leaf, spec = rng.choice(leaves)
        source = rng.choices(("quota", "spot", "payg"), (85, 10, 5))[0]
        gpus = rng.choice((1, 1, 2, 4, 8, 8))
        gang = rng.choice((1, 1, 1, 2, 2, 4, 8))
        itype = spec[0] if source != "quota" or rng.random() < 0.5 else None
        pods = tuple(PodRequest("worker", i, per_gpu(spec, gpus), itype) for i in range(gang))
        jobs.append(PendingJob(
            f"job{j:06d}", NOW - timedelta(seconds=rng.randint(0, 86_400)), pods,
            leaf.id if source == "quota" else None, leaf.tenant,
            rng.choice((FORBIDDEN, FORBIDDEN, ACCEPT, FORCE)), rng.randint(1, 9), source,
            Decimal(rng.randint(2, 9)) / 10 if source == "spot" else None))
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scales", default="1,2,4")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backfill", choices=("on", "off"), default="off",
                        help="on: the leaf quotas backfill behind a reservation, their jobs "
                             "typically running an hour (the quota setting Backfill, off by default)")
    args = parser.parse_args()
    before = reference_loop_s()
    best_cpu: dict[int, float] = {}
    print(f"{'scale':>5} {'nodes':>6} {'quotas':>6} {'pods':>6} {'jobs':>6} "
          f"{'admit':>6} {'preempt':>7} {'wait':>6} {'best s':>7} {'median s':>8} {'cpu s':>6}")
    for scale in (int(s) for s in args.scales.split(",")):
        snap = make_snapshot(scale, args.seed)
        if args.backfill == "on":
            snap = replace(snap, quotas=tuple(replace(q, backfill=True, typical_run=timedelta(hours=1))
                                              if q.parent_id else q for q in snap.quotas))
        times, cpu = [], []
        for _ in range(args.repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            d = plan(snap, NOW)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        print(f"{scale:>4}x {len(snap.nodes):>6} {len(snap.quotas):>6} {len(snap.pods):>6} "
              f"{len(snap.jobs):>6} {len(d.admissions):>6} {len(d.preemptions):>7} "
              f"{len(d.waiting):>6} {min(times):>7.3f} {statistics.median(times):>8.3f} "
              f"{min(cpu):>6.3f}")
        best_cpu[scale] = min(cpu)
    scales = sorted(best_cpu)
    if len(scales) > 1:
        lo, hi = scales[0], scales[-1]
        ratio = best_cpu[hi] / best_cpu[lo]
        print(f"{hi}x / {lo}x: {ratio:.2f} times the CPU for {hi / lo:g} times the work; growth "
              f"exponent {math.log(ratio) / math.log(hi / lo):.2f} (1.00 = linear)")
    print(speed(before))


if __name__ == "__main__":
    main()
