"""Benchmark: goodput of borrowers that a lender reclaims, elastic against gang, with real processes.

Run by hand:  python bench/goodput.py [--nodes 4] [--seconds 300] [--seed 7] [--ckpt-every 20]
(with DATABASE_URL and REDIS_URL for PostgreSQL + Redis; see bench/harness.py for the database).

One root quota, two children: the lender owns --nodes nodes of one GPU each, run by real process
agents (`manage.py agent --node ... --runtime process`), the borrower none. A borrower job of one
worker per node borrows all of them, one after the other on the same seeded schedule
(--borrowers): an elastic job resized in place ("in place": ElasticSpec MinParallelism 1,
MaxParallelism --nodes, ResizeInPlace), the same restarted at each resize ("elastic"), and a
gang of as many workers with fault tolerance ("gang": AIMaster re-queues it after each
preemption). Each worker is a real training process: a small CPU PyTorch model whose gradients
are averaged over the workers (gloo, easyckpt.ElasticGroup), stepping at a fixed pace, rank 0
saving an EasyCkpt checkpoint every --ckpt-every steps and flushing one on SIGTERM. Meanwhile the lender submits one-node jobs at
seeded times (`sleep` processes), which reclaim a node each, and the borrower gets it back when
they end. After --seconds the borrower is stopped.

Figures, per borrower:
  goodput           samples kept (in its last checkpoint) / (GPU-seconds its pods held x the
                    samples a worker computes per second alone, measured first). A sample is one
                    worker's step: a step of W data-parallel workers is W samples.
  lost per preemption   steps the job had done when stopped minus the step it resumed from.
  kept per s        samples kept per second of the run: what the borrower got out of the idle
                    nodes (a gang waiting to be re-admitted holds nothing, so its goodput alone
                    does not show what its waits cost).
  resume            from a lender job's end (its node free again) to the borrower's pods bound
                    there (the platform's part), and to its first step after that (plus its own
                    start-up: a Python process importing torch).
Targets (issue #31): goodput >= 95 % for elastic borrowers with EasyCkpt; at most one checkpoint
interval lost per preemption; resume within 5 s of the capacity being free, plus start-up.

With `worker` as its first argument this file is the training process itself (the pods' command).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

try:
    from bench import harness
except ImportError:  # run as a script
    import harness

EVENTS = "goodput-events.jsonl"  # rank 0's log of its starts and stops, beside the checkpoints
# The borrowers, each run on the same schedule: elastic resized in place, elastic restarted at each
# resize, and a gang of fault-tolerant workers re-queued after each preemption.
KINDS = ("in place", "elastic", "gang")


# ---- the training process --------------------------------------------------------------------


def worker(step_s: float, ckpt_every: int, ckpt_dir: str | None = None) -> int:
    """A data-parallel worker: gradients averaged over the group each step (gloo), rank 0 owns the
    checkpoint (the state is the same on every rank). An in-place job's group re-forms at each
    resize (easyckpt.ElasticGroup); otherwise a lost peer ends the worker, rank 0 checkpointing first."""
    import torch
    import torch.distributed as dist

    import easyckpt

    group = easyckpt.ElasticGroup(timeout_s=60)
    rank = group.rank  # rank 0 stays the same process in every generation of an in-place job
    ckpt = easyckpt.Checkpointer(ckpt_dir, keep=2, world_size=group.world_size, rank=rank)
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    latest = ckpt.load_latest() if rank == 0 else None
    step, samples = 0, 0
    if latest:
        step, state = latest
        samples = state["samples"]
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    current = {"step": step, "samples": samples}
    current.update(group.resync(model, optimizer, value=current))

    def snapshot():
        return current["step"], {"samples": current["samples"], "model": model.state_dict(),
                                 "optimizer": optimizer.state_dict()}

    def regrouped():
        if rank == 0:
            _event(log, "stop", current["step"], world)
        current.update(group.resync(model, optimizer, value=current))
        return current["step"]

    if rank == 0:
        ckpt.install_sigterm_handler(snapshot)
    log = ckpt.base_dir / EVENTS
    world, began = group.world_size, current["step"]
    try:
        while True:
            started = time.monotonic()
            if group.poll():
                began = regrouped()
            world = group.world_size
            torch.manual_seed(current["step"] * 1000 + group.rank)  # each rank its own batch
            x = torch.rand(64, 32)
            loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            try:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
            except RuntimeError as error:  # a peer left: the next generation, or the end
                if rank == 0:
                    ckpt.save(*snapshot())
                    ckpt.wait()
                group.recover(error)
                began = regrouped()
                continue
            optimizer.step()
            current["step"], current["samples"] = current["step"] + 1, current["samples"] + world
            if current["step"] == began + 1 and rank == 0:
                _event(log, "start", began, world)  # the first step is done: resumed
            if rank == 0 and current["step"] % ckpt_every == 0:
                ckpt.save(*snapshot())
            time.sleep(max(0.0, step_s - (time.monotonic() - started)))  # the pace of a real step
    finally:
        if rank == 0:
            _event(log, "stop", current["step"], world)


def _event(path: Path, kind: str, step: int, world: int) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({"event": kind, "time": time.time(), "step": step, "world": world}) + "\n")


# ---- the run -----------------------------------------------------------------------------------


def run(services: harness.Services, *, nodes: int = 4, seconds: float = 300, seed: int = 7, ckpt_every: int = 20,
        step_s: float = 0.1, lender_every_s: float = 45, lender_run_s: tuple = (15, 40), grace_s: int = 10,
        borrowers: tuple = KINDS) -> dict:
    from django.conf import settings

    pod_root = services.var / "pods"
    settings.OPENDLC_POD_ROOT = pod_root
    services.env["OPENDLC_POD_ROOT"] = str(pod_root)
    rate = _rate_alone(services.var / "alone", step_s, ckpt_every)
    cluster = _cluster(nodes)
    services._worker("scheduler", "scheduler", 1, loglevel="INFO")
    services._worker("platform", "default", 2)
    for name in cluster["nodes"]:
        services._spawn(f"agent-{name}", [sys.executable, "manage.py", "agent", "--node", name, "--runtime", "process",
                                          "--pod-user", "", "--concurrency", "2", "--loglevel", "WARNING"], agent=name)
    from quotas.models import Node

    services.wait(lambda: Node.objects.filter(name__in=cluster["nodes"], last_heartbeat__isnull=False).count() == nodes,
                  "the agents' first heartbeats", timeout=120, interval=0.2)
    schedule = _lender_schedule(seed, seconds, lender_every_s, lender_run_s)
    out = {"rate": rate, "nodes": nodes, "seconds": seconds, "ckpt_every": ckpt_every, "step_s": step_s,
           "schedule": schedule, "borrowers": []}
    try:
        for kind in borrowers:
            out["borrowers"].append(_phase(services, cluster, kind, schedule, seconds, step_s, ckpt_every,
                                           grace_s, pod_root))
    finally:
        _stop_everything(services, cluster)
    return out


def _rate_alone(where: Path, step_s: float, ckpt_every: int, seconds: float = 8.0) -> float:
    """Samples one worker computes per second alone (its start-up left out)."""
    import subprocess

    where.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WORLD_SIZE": "1", "RANK": "0", "PYTHONPATH": str(harness.REPO),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(harness.free_port())}
    proc = subprocess.Popen([sys.executable, __file__, "worker", str(step_s), str(ckpt_every), str(where / "ckpt")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = where / "ckpt" / EVENTS
    deadline = time.monotonic() + 120
    while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    began = time.time()
    time.sleep(seconds)
    proc.terminate()
    proc.wait(timeout=60)
    stops = [e for e in _events(log) if e["event"] == "stop"]
    return (stops[-1]["step"] - 1) / (stops[-1]["time"] - began) if stops else 1 / step_s


def _cluster(nodes: int) -> dict:
    from quotas.models import Executor, Node

    team = harness.make_team("goodput")
    spec = harness.make_spec("proc.1gpu", 1)
    root = harness.make_quota(team, "goodput-root")
    lender = harness.make_quota(team, "lender", root)
    borrower = harness.make_quota(team, "borrower", root)
    names = [f"gp-{i}" for i in range(nodes)]
    Node.objects.bulk_create(Node(name=n, spec=spec, quota=lender, executor=Executor.PROCESS) for n in names)
    return {"team": team, "spec": spec, "lender": lender, "borrower": borrower, "nodes": names}


def _lender_schedule(seed: int, seconds: float, every_s: float, run_s: tuple) -> list[tuple[float, float]]:
    """(offset, duration) of each lender job: seeded, one node each, none running past the end."""
    rng = random.Random(seed)
    out, at = [], every_s * rng.uniform(0.5, 1.0)
    while at < seconds - run_s[1]:
        out.append((round(at, 1), round(rng.uniform(*run_s), 1)))
        at += rng.expovariate(1 / every_s) + run_s[1]
    return out


def _submit_borrower(cluster: dict, kind: str, step_s: float, ckpt_every: int, grace_s: int):
    from jobs.services import JobRequest, RoleRequest, create_job

    team, pods = cluster["team"], len(cluster["nodes"])
    command = f"{sys.executable} {Path(__file__).resolve()} worker {step_s} {ckpt_every}"
    elastic = kind != "gang"
    spec = {"EnableElasticTraining": True, "MinParallelism": 1, "MaxParallelism": pods} if elastic else {}
    if kind == "in place":
        spec["ResizeInPlace"] = True
    return create_job(team.user, JobRequest(
        display_name=f"{kind} borrower", user_command=command,
        quota_id=cluster["borrower"].quota_id, oversold_type="ForceQuotaOverSold", termination_grace_s=grace_s,
        envs={"PYTHONPATH": str(harness.REPO)}, elastic_spec=spec,
        # The gang is re-queued after each preemption, as a preempted training job with AIMaster is.
        ft_enabled=not elastic, ft_max_restarts=0,
        roles=[RoleRequest(pod_count=pods, instance_type=cluster["spec"].instance_type, image="process")]))


def _submit_lender(cluster: dict, duration: float):
    from jobs.services import JobRequest, RoleRequest, create_job

    return create_job(cluster["team"].user, JobRequest(
        display_name="lender", user_command=f"sleep {duration}", quota_id=cluster["lender"].quota_id,
        roles=[RoleRequest(pod_count=1, instance_type=cluster["spec"].instance_type, image="process")]))


def _phase(services, cluster, kind, schedule, seconds, step_s, ckpt_every, grace_s, pod_root) -> dict:
    from jobs.models import Job
    from jobs.services import stop_job
    from jobs.states import FINAL

    job = _submit_borrower(cluster, kind, step_s, ckpt_every, grace_s)
    services.wait(lambda: Job.objects.filter(pk=job.pk, status="Running").exists(), "the borrower to run",
                  timeout=180, interval=0.2)
    began, lenders, pending = time.monotonic(), [], list(schedule)
    while time.monotonic() - began < seconds:
        while pending and time.monotonic() - began >= pending[0][0]:
            lenders.append(_submit_lender(cluster, pending.pop(0)[1]))
        time.sleep(0.2)
    job = Job.objects.get(pk=job.pk)
    if job.status in FINAL:
        raise RuntimeError(f"the {kind} borrower ended by itself: {_why(job)}")
    stop_job(cluster["team"].user, job)
    services.wait(lambda: Job.objects.filter(pk=job.pk, status__in=("Stopped", "Failed", "Succeeded")).exists(),
                  "the borrower to stop", timeout=180, interval=0.2)
    for lender in lenders:  # a lender still queued or running must not hold the next phase's nodes
        lender = Job.objects.get(pk=lender.pk)
        if lender.status not in ("Succeeded", "Failed", "Stopped"):
            stop_job(cluster["team"].user, lender)
    services.wait(lambda: not Job.objects.filter(pk__in=[j.pk for j in lenders]).exclude(
        status__in=("Succeeded", "Failed", "Stopped")).exists(), "the lender's jobs to end", timeout=180)
    return _figures(Job.objects.get(pk=job.pk), lenders, pod_root, kind)


def _why(job) -> str:
    """The job's reason and each of its pods' ends, for a borrower that ended before its stop."""
    from jobs.models import PodEvent

    events = PodEvent.objects.filter(pod__job=job).order_by("at").values_list("pod__pod_id", "reason", "message")
    return f"{job.status} {job.reason_code}: {job.reason_message}\n" + "\n".join(" ".join(e) for e in events)


def _figures(job, lenders, pod_root: Path, kind: str) -> dict:
    import easyckpt
    from jobs.models import Pod

    held = sum(((p.finished_at - p.bound_at).total_seconds()) * p.gpu
               for p in Pod.objects.filter(job=job, bound_at__isnull=False, finished_at__isnull=False))
    ckpt_dir = pod_root / job.job_id / "checkpoints"
    latest = easyckpt.Checkpointer(ckpt_dir, keep=2, world_size=1, rank=0).load_latest()
    events = _events(ckpt_dir / EVENTS)
    starts = [e for e in events if e["event"] == "start"]
    stops = [e for e in events if e["event"] == "stop"]
    lost = [stop["step"] - start["step"] for stop, start in zip(stops, starts[1:])]
    freed = sorted(p.finished_at.timestamp() for p in Pod.objects.filter(
        job_id__in=[j.pk for j in lenders], finished_at__isnull=False))
    pods = list(Pod.objects.filter(job=job, bound_at__isnull=False).values("bound_at", "started_at", "finished_at",
                                                                             "reason_code"))
    bound = sorted(p["bound_at"].timestamp() for p in pods)
    decided = sorted(e.at.timestamp() for e in job.events.filter(reason="ElasticResize"))
    resumes, binds, phases = [], [], []
    for at in freed:
        later = [s["time"] for s in starts if s["time"] > at]
        placed = [b for b in bound if b >= at]
        if later:
            resumes.append(later[0] - at)
        if placed:
            binds.append(placed[0] - at)
        if later and kind != "gang":
            phases.append(_phases(at, later[0], decided, pods))
    return {"kind": kind, "job": job.job_id, "samples": latest[1]["samples"] if latest else 0,
            "steps": latest[0] if latest else 0, "held_gpu_s": held, "starts": len(starts),
            "lost_steps": lost, "resume_s": resumes, "bind_s": binds, "phases": phases,
            "restarts": job.restart_count, "preemption_restarts": job.preemption_restart_count,
            "resizes": job.events.filter(reason="ElasticResize").count()}


def _phases(freed: float, stepping: float, decided: list[float], pods: list[dict]) -> dict:
    """Where the time from a node being free to the borrower stepping again went: the resize decided
    (the cycle), the workers stopped for it ended (their SIGTERM flush), the workers started again
    (the agents' spawn), and their own start-up until the first step."""
    resize = next((t for t in decided if t >= freed), freed)
    ended = [p["finished_at"].timestamp() for p in pods if p["finished_at"] and p["reason_code"] == "Resize"
             and resize <= p["finished_at"].timestamp() <= stepping]
    stopped = max(ended, default=resize)
    started = [p["started_at"].timestamp() for p in pods if p["started_at"] and stopped <= p["started_at"].timestamp() <= stepping]
    spawned = max(started, default=stopped)
    return {"decide": resize - freed, "stop": stopped - resize, "spawn": spawned - stopped, "start-up": stepping - spawned}


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _stop_everything(services, cluster) -> None:
    from jobs.models import Job
    from jobs.services import stop_job
    from jobs.states import ACTIVE

    for job in Job.objects.filter(status__in=ACTIVE):
        stop_job(cluster["team"].user, job)
    try:
        services.wait(lambda: not Job.objects.filter(status__in=ACTIVE).exists(), "every job to end", timeout=60)
    except (TimeoutError, RuntimeError):
        pass  # closing the services next; the report says what was measured
    from agent import procs
    from agent.process import MARKER, marker

    for name in cluster["nodes"]:  # agents leave their pods running on purpose: end them here
        for pgid in procs.groups_with_env(MARKER, marker(name, services.var / "pods")):
            procs.signal_group(pgid, 9)


def report(r: dict) -> str:
    rows = []
    for b in r["borrowers"]:
        ideal = b["held_gpu_s"] * r["rate"]
        goodput = b["samples"] / ideal if ideal else 0.0
        lost = b["lost_steps"]
        lost_text = f"{max(lost)} (mean {sum(lost) / len(lost):.1f})" if lost else "-"
        rows.append((b["kind"], f"{goodput:.1%}", f"{b['samples']:,}", f"{b['samples'] / r['seconds']:.1f}",
                     f"{b['held_gpu_s']:,.0f}", len(lost),
                     lost_text, _spread(b["bind_s"]), _spread(b["resume_s"]), b["resizes"], b["preemption_restarts"]))
    breakdowns = [f"{b['kind']}, node free -> stepping, by phase (s): " + ", ".join(
        f"{name} {_spread([p[name] for p in b['phases']])}" for name in ("decide", "stop", "spawn", "start-up"))
        for b in r["borrowers"] if b["phases"]]
    lines = [(f"goodput: {r['nodes']} one-GPU nodes, {r['seconds']:.0f} s a borrower, "
              f"{len(r['schedule'])} lender jobs (seeded), checkpoint every {r['ckpt_every']} steps of "
              f"{r['step_s']} s; a worker alone computes {r['rate']:.2f} samples/s"),
             harness.table(rows, ("borrower", "goodput", "samples kept", "kept per s", "GPU-s held", "resumed",
                                  "lost steps a stop: max", "node free -> bound (s)", "node free -> stepping (s)",
                                  "resizes", "re-queued")),
             *breakdowns,
             ("goodput = samples kept / (GPU-seconds held x samples per second of one worker alone); targets: "
              ">= 95 % elastic, lost <= one checkpoint interval, bound within 5 s of the node being free")]
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"median {ordered[len(ordered) // 2]:.1f}, max {ordered[-1]:.1f}"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        sys.path.insert(0, str(harness.REPO))
        step_s, every = float(sys.argv[2]), int(sys.argv[3])
        sys.exit(worker(step_s, every, sys.argv[4] if len(sys.argv) > 4 else None))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ckpt-every", type=int, default=20)
    parser.add_argument("--step", type=float, default=0.1, help="seconds a training step takes")
    parser.add_argument("--lender-every", type=float, default=45, help="mean seconds between lender jobs")
    parser.add_argument("--borrowers", default=",".join(KINDS),
                        help=f"which borrowers to run, in order, comma-separated (of: {', '.join(KINDS)})")
    parser.add_argument("--lender-run", type=float, nargs=2, default=(15, 40), metavar=("MIN", "MAX"),
                        help="seconds a lender job runs, drawn between these")
    args = parser.parse_args()
    harness.run_standalone("goodput", run, report, nodes=args.nodes, seconds=args.seconds, seed=args.seed,
                           ckpt_every=args.ckpt_every, step_s=args.step, lender_every_s=args.lender_every,
                           lender_run_s=tuple(args.lender_run), borrowers=_kinds(parser, args.borrowers))


def _kinds(parser, text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--borrowers: each must be one of {', '.join(KINDS)}, got {text!r}")
    return kinds


if __name__ == "__main__":
    main()
