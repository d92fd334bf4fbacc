"""Benchmark: Kueue's baseline scheduler test, replayed end to end through the real system.

Run by hand:  python bench/kueue_baseline.py [--shape pod|gang] [--scale 1] [--cohorts 5] [--queues 6]
(with DATABASE_URL and REDIS_URL for PostgreSQL + Redis; see bench/harness.py for the database).

The workload is kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/generator.yaml:
5 cohorts x 6 queues, each queue a nominal quota of 20, borrowing allowed, reclaim within the cohort,
within-queue preemption of lower priority. Per queue, all classes starting together:
    small   350 jobs, request 1,  runs 200 ms,  priority 50,  one every 100 ms
    medium  100 jobs, request 5,  runs 500 ms,  priority 100, one every 500 ms
    large    50 jobs, request 20, runs 1000 ms, priority 200, one every 1200 ms
Each of Kueue's workloads there is one pod asking for its request (runner/generator/generator.go:
a workload with one pod set of count 1), and Kueue admits it by quota alone, with no nodes.

Mapped onto OpenDLC:
    cohort -> a root quota; queue -> a child quota ("1" of Kueue's quota = 1 GPU).
    job    -> --shape pod (default), as Kueue's workload: one pod with its own resources (ResourceConfig)
              of 1, 5 or 20 GPUs; each queue owns one simulated node of 20 GPUs, which the scheduler
              packs best-fit. Unlike Kueue's count, a borrowed pod must fit on one node.
              --shape gang: each queue owns 20 nodes of 1 GPU and a job is a gang of 1, 5 or 20
              one-GPU pods (all placed together or none): Kueue's pure count, no fragmentation, at
              3.7 times the pods (55,500 against 15,000) to bind, start, report and free.
              Either way the job is Acceptable (AcceptQuotaOverSold: own quota first, else borrows
              idle GPUs of its cohort), priority 1 / 2 / 3 (same order as 50 / 100 / 200),
              SIM_DURATION_S = the run time; the child quotas allow priority preemption. A preempted
              job is re-queued and runs again (fault tolerance on, preemption restarts unlimited),
              as a preempted Kueue workload is.
    submit -> jobs.services.create_job, one call per job, at the generator's times, from
              --submitters processes sharing the plan (one that falls behind submits as fast as it
              can; the largest lag is printed).

Printed: wall time from the first submission to the last completion; the average time to admission
per class (submission to the first binding of the job's pod, i.e. EnvPreparing); the average usage
of the queues' nominal capacity over the wall time (GPU-seconds bound to pods, binding to the end the
agent reported, over 20 GPUs x queues x wall: capacity held, as Kueue counts admitted quota), and
the part of it the jobs' own run time fills (work over capacity x wall: the rest is capacity held
while a pod is started, reported and freed); and the capacity bound (the work over the capacity).
Then the two phases apart: the capacity held while jobs are being submitted, and after the last
submission the backlog (jobs not finished yet), how fast it drained and the capacity held meanwhile.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import multiprocessing
import resource
import time
from collections import defaultdict
from dataclasses import dataclass
from statistics import median

try:
    from bench import harness
except ImportError:  # run as a script: bench/ is not on the path yet
    import harness

KUEUE = {"wall_s": 351.0, "small_s": 215.5, "medium_s": 76.8, "large_s": 6.7, "usage_pct": 58.7}
QUOTA_GPUS = 20


@dataclass(frozen=True)
class JobClass:
    name: str
    count: int
    gpus: int
    duration_s: float
    priority: int
    every_s: float


CLASSES = (JobClass("small", 350, 1, 0.2, 1, 0.1), JobClass("medium", 100, 5, 0.5, 2, 0.5),
           JobClass("large", 50, 20, 1.0, 3, 1.2))


SHAPES = ("pod", "gang")


@dataclass
class Cluster:
    team: harness.Team
    spec: object  # the nodes' instance type
    queues: list  # child quotas
    shape: str


def build(cohorts: int, queues: int, shape: str = "pod") -> Cluster:
    team = harness.make_team("kueue")
    node_gpus, per_queue = (QUOTA_GPUS, 1) if shape == "pod" else (1, QUOTA_GPUS)
    spec = harness.make_spec(f"sim.{node_gpus}gpu", node_gpus)
    children = []
    for c in range(cohorts):
        root = harness.make_quota(team, f"cohort{c}")
        for q in range(queues):
            child = harness.make_quota(team, f"cohort{c}-q{q}", root, priority_preemption=True)
            harness.make_nodes(child, spec, per_queue, f"kueue-c{c}q{q}")
            children.append(child)
    return Cluster(team, spec, children, shape)


def schedule_of(queues: int, scale: float) -> list[tuple[float, int, JobClass]]:
    """(offset s, queue index, class) for every job, in submission order."""
    events = []
    for q in range(queues):
        for cls in CLASSES:
            count = max(1, round(cls.count * scale))
            events += [(i * cls.every_s, q, cls) for i in range(count)]
    heapq.heapify(events := [(t, q, CLASSES.index(c), c) for t, q, c in events])
    return [(t, q, c) for t, q, _, c in (heapq.heappop(events) for _ in range(len(events)))]


def run(services: harness.Services, *, scale: float = 1.0, cohorts: int = 5, queues: int = 6,
        timeout_s: float = 900, submitters: int = 3, shape: str = "pod") -> dict:
    cluster = build(cohorts, queues, shape)
    cpu0 = harness.machine_cpu_seconds()  # from the services' start, as their own CPU times
    services.start()
    harness.warm_up(services, cluster.team, cluster.queues[0], cluster.spec)
    plan = schedule_of(len(cluster.queues), scale)
    # Kueue's generator creates workloads from many clients at once; one Python submitter tops out
    # near a hundred create_job calls a second, below the generator's 250 a second. Several
    # processes share the plan round-robin, each at the generator's times.
    from django.db import connections

    connections.close_all()  # a forked child must not share the parent's connection
    t0 = time.monotonic()
    parts = [(plan[n::submitters], cluster, t0) for n in range(submitters)]
    pool = multiprocessing.get_context("fork").Pool(submitters)
    done = pool.starmap(_submit_part, parts)
    # close + join, not the with block's terminate(): a worker killed while it held the task
    # queue's lock left another waiting on it forever, and the run hung after its last job.
    pool.close()
    pool.join()
    submitted_s = time.monotonic() - t0
    jobs = [job for part, _ in done for job in part]
    pks = [pk for pk, _ in jobs]
    services.wait(lambda: _unfinished(pks) == 0, f"all {len(pks)} jobs to finish", timeout=timeout_s, interval=0.5)
    cpu = services.cpu_report(cpu0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
                              + resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime)
    busy_s = harness.machine_cpu_seconds()[0] - cpu0[0]
    return {**figures(jobs, len(cluster.queues), submitted_s, max(lag for _, lag in done)), "cpu": cpu,
            "cycles": services.cycle_report(), "busy_s": busy_s, "loop_s": harness.reference_loop_s()}


def _submit_part(plan: list[tuple[float, int, JobClass]], cluster: Cluster, t0: float
                 ) -> tuple[list[tuple[int, str]], float]:
    """In a submitter process: submit these jobs at their times; (job pk, class name)s and the lag."""
    from django.db import connections

    jobs, lag = [], 0.0
    try:
        for offset, q, cls in plan:
            delay = t0 + offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            lag = max(lag, -delay)
            job = submit(cluster, q, cls)
            jobs.append((job.pk, cls.name))
    finally:
        connections.close_all()
    return jobs, lag


def submit(cluster: Cluster, queue: int, cls: JobClass):
    """One job of this class on this queue, shaped as the cluster is."""
    from jobs.models import OversoldType

    pods, gpus = (1, cls.gpus) if cluster.shape == "pod" else (cls.gpus, None)
    return harness.submit(cluster.team, cluster.queues[queue], cluster.spec, duration_s=cls.duration_s, pods=pods,
                          gpus=gpus, priority=cls.priority, oversold=OversoldType.ACCEPT, name=cls.name,
                          restart_on_preemption=True)


def _unfinished(pks: list[int]) -> int:
    from jobs.models import Job
    from jobs.states import FINAL, JobStatus

    # polled: a pk range, not an IN list of 15,000 (the warm-up job before them is finished), and
    # the statuses not final, which the status index finds, where excluding the final ones read
    # every row of the range each time (the poller's own load on the machine it measures)
    unfinished = [s for s in JobStatus if s not in FINAL]
    return Job.objects.filter(pk__range=(min(pks), max(pks)), status__in=unfinished).count()


def figures(jobs: list[tuple[int, str]], queues: int, submitted_s: float, lag_s: float) -> dict:
    from django.db.models import Min

    from jobs.models import Job, Pod

    pks = [pk for pk, _ in jobs]
    # The run's jobs are one pk range (as _unfinished polls them): an IN list of 150,000 ids at
    # --scale 10 is over PostgreSQL's 65,535 parameters.
    ours = (min(pks), max(pks))
    assert ours[1] - ours[0] + 1 == len(pks), "another job was created during the run"
    rows = {pk: (sub, fin, status, restarts) for pk, sub, fin, status, restarts in Job.objects.filter(
        pk__range=ours).values_list("pk", "submitted_at", "finished_at", "status", "preemption_restart_count")}
    admitted = dict(Pod.objects.filter(job__id__range=ours).values("job_id").annotate(first=Min("bound_at"))
                    .values_list("job_id", "first"))
    start = min(r[0] for r in rows.values())
    end = max(r[1] for r in rows.values())
    wall = (end - start).total_seconds()
    pods = [(gpu, (bound - start).total_seconds(), (fin - start).total_seconds()) for gpu, bound, fin in
            Pod.objects.filter(job__id__range=ours, bound_at__isnull=False, finished_at__isnull=False).values_list(
                "gpu", "bound_at", "finished_at")]
    held = sum(gpu * (fin - bound) for gpu, bound, fin in pods)
    work = sum(c.gpus * c.duration_s * sum(1 for _, name in jobs if name == c.name) for c in CLASSES)
    capacity = QUOTA_GPUS * queues
    # The two phases: while jobs are submitted, and the drain of what waits after the last one.
    last = max(r[0] for r in rows.values())
    split = (last - start).total_seconds()
    held_before = sum(gpu * max(0.0, min(fin, split) - bound) for gpu, bound, fin in pods)
    result = {
        "jobs": len(jobs), "succeeded": sum(1 for r in rows.values() if r[2] == "Succeeded"),
        "pods": Pod.objects.filter(job__id__range=ours, incarnation=0).count(),
        "preemptions": sum(r[3] for r in rows.values()),
        "wall_s": wall, "bound_s": work / capacity, "usage_pct": 100 * held / (capacity * wall),
        "work_pct": 100 * work / (capacity * wall),
        "submitted_s": submitted_s, "submit_lag_s": lag_s,
        "split_s": split, "usage_submitting_pct": 100 * held_before / (capacity * split) if split else 0.0,
        "usage_draining_pct": 100 * (held - held_before) / (capacity * (wall - split)) if wall > split else 0.0,
        "backlog": sum(1 for r in rows.values() if r[1] > last),  # submitted, not finished, at the last submission
    }
    for cls in CLASSES:
        waits = [(admitted[pk] - rows[pk][0]).total_seconds() for pk, name in jobs if name == cls.name]
        result[f"{cls.name}_s"] = sum(waits) / len(waits) if waits else 0.0
        result[f"{cls.name}_jobs"] = len(waits)
    return {**result, **per_gpu(ours, capacity * wall)}


def per_gpu(ours: tuple[int, int], capacity_s: float) -> dict:
    """Where the held capacity goes, GPU by GPU (node and index), from the pods' bound_at,
    started_at and finished_at: running (preempted pods' runs apart), bound but not started yet,
    and the wait of a GPU from one pod's end to the next pod's binding."""
    from jobs.models import Pod, PodSubStatus

    run = lost = starting = 0.0
    to_start, by_gpu = [], defaultdict(list)
    for node, indices, bound, started, fin, sub_status in Pod.objects.filter(
            job__id__range=ours, bound_at__isnull=False, finished_at__isnull=False).values_list(
            "node_id", "gpu_indices", "bound_at", "started_at", "finished_at", "sub_status"):
        evicted = sub_status == PodSubStatus.EVICTED
        began = started or fin  # a pod stopped before it started held its GPUs only while binding
        seconds = max(0.0, (fin - began).total_seconds())
        if evicted:
            lost += seconds * len(indices)
        else:
            run += seconds * len(indices)
        to_start.append((began - bound).total_seconds())
        starting += max(0.0, to_start[-1]) * len(indices)
        for gpu in indices:
            by_gpu[node, gpu].append((bound, fin))
    gaps = []
    for spans in by_gpu.values():
        spans.sort()
        gaps += [max(0.0, (nxt[0] - cur[1]).total_seconds()) for cur, nxt in itertools.pairwise(spans)]
    pct = 100 / capacity_s if capacity_s else 0.0
    return {"running_pct": run * pct, "preempted_run_pct": lost * pct, "starting_pct": starting * pct,
            "to_start_p50_s": median(to_start) if to_start else 0.0,
            "gap_p50_s": median(gaps) if gaps else 0.0, "gap_mean_s": sum(gaps) / len(gaps) if gaps else 0.0}


def report(r: dict) -> str:
    rows = [
        ("wall, first submission to last completion (s)", f"{r['wall_s']:.1f}", f"{KUEUE['wall_s']:.1f}", "< 90"),
        *[(f"avg time to admission, {c.name} ({r[c.name + '_jobs']} jobs) (s)", f"{r[c.name + '_s']:.2f}",
           f"{KUEUE[c.name + '_s']:.1f}", "") for c in CLASSES],
        ("avg usage of nominal capacity (%)", f"{r['usage_pct']:.1f}", f"{KUEUE['usage_pct']:.1f}", "> 85"),
        ("  of which the jobs' run time, work / (capacity x wall) (%)", f"{r['work_pct']:.1f}", "", ""),
        ("capacity bound, work / capacity (s)", f"{r['bound_s']:.1f}", "66", ""),
    ]
    lines = [harness.table(rows, ("figure", "OpenDLC", "Kueue", "target")),
             f"jobs {r['jobs']} ({r['pods']} pods), succeeded {r['succeeded']}, preemption restarts {r['preemptions']}; "
             f"submissions took {r['submitted_s']:.1f} s (at most {r['submit_lag_s']:.2f} s behind the generator)",
             f"capacity held while jobs were submitted (first {r['split_s']:.0f} s) {r['usage_submitting_pct']:.1f} %; "
             f"then {r['backlog']} unfinished jobs drained in {r['wall_s'] - r['split_s']:.0f} s "
             f"({r['backlog'] / max(1e-9, r['wall_s'] - r['split_s']):.0f} jobs/s), "
             f"capacity held {r['usage_draining_pct']:.1f} %",
             f"per GPU: running {r['running_pct']:.1f} % (and preempted pods' lost runs {r['preempted_run_pct']:.1f} %), "
             f"bound but not started {r['starting_pct']:.1f} % (a pod starts {r['to_start_p50_s']:.3f} s p50 after "
             f"its binding), idle {100 - r['usage_pct']:.1f} % (from a pod's end to the next binding on its GPU "
             f"{r['gap_p50_s']:.3f} s p50, {r['gap_mean_s']:.3f} s mean)",
             r.get("cpu", ""), r.get("cycles", "")]
    if "busy_s" in r:
        # Core-seconds scale with the machine's speed on the day; over the reference loop they
        # compare across days (and across --scale: the cost per job at 1x and 10x).
        per_k = r["busy_s"] / r["jobs"] * 1000
        lines.append(f"cost: whole machine {per_k:.1f} core-seconds per 1,000 jobs; over the reference loop "
                     f"({r['loop_s']:.2f} s after the run) {per_k / r['loop_s']:.0f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=SHAPES, default="pod",
                        help="pod: a job is one pod of its GPUs on 20-GPU nodes; gang: that many 1-GPU pods")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each class's job count")
    parser.add_argument("--cohorts", type=int, default=5)
    parser.add_argument("--queues", type=int, default=6, help="queues per cohort")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--submitters", type=int, default=3, help="processes submitting jobs")
    args = parser.parse_args()
    harness.run_standalone("kueue", run, report, scale=args.scale, cohorts=args.cohorts, queues=args.queues,
                           timeout_s=args.timeout, submitters=args.submitters, shape=args.shape)

if __name__ == "__main__":
    main()
