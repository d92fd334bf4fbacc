"""How long does Checkpointer.save() block training, versus a synchronous torch.save?

    python bench/checkpoint_stall.py                    # 1 GiB of CPU float32 in 16 tensors
    python bench/checkpoint_stall.py --device cuda      # same state on the GPU (no fork mode)
    python bench/checkpoint_stall.py --size-mib 256 --runs 3 --dir /mnt/nvme/tmp --compute-ms 500

Prints medians over --runs: the synchronous baseline (torch.save, and torch.save + fsync, which is
what durability costs); the time save() blocks the caller in each snapshot mode: fork (a child
writes the copy-on-write image; measured first, while the process holds no buffer pool, with the
RSS it forked at), deferred (the default: the copy runs in the writer thread after save()
returned), copy with the reusable buffer pool (steady state, plus the first, cold save that
allocates the pool), and copy with per-save clone(); the raw copy_ time of the state (the
memory-bandwidth floor for any copy-based snapshot); what fork mode costs afterwards: an in-place
update of every tensor (t.add_(1), like an optimizer step) right after save() while the child
still shares the pages, right after a write completed, with no save at all, and right after a
copy-mode save (same disk and CPU competition, no copy-on-write); and how much a
pure-Python loop slows down while the background write runs (GIL contention).

Then where the deferred mode's cost goes: a training loop whose step is --compute-ms of matmuls on
tensors outside the state (they model the forward and backward passes, which read the weights and
write nothing of the state; a real 1 GiB model takes far longer per step on this kind of CPU, so
the default is a short, unfavourable window for the copy to hide in) followed by a real
torch.optim.SGD step over the state's tensors as parameters (an in-place update of every weight,
held back by easyckpt's optimizer hook until the copy is done). For deferred and copy mode it
prints the time save() blocked, how long the SGD step waited for the snapshot (measured between a
global step pre-hook registered before easyckpt's and the optimizer's own pre-hook), the step
time against the same step without a checkpoint (interleaved, same conditions), and the steps
that run while the write goes on (the writer competes for the CPU and memory bandwidth).
Target from issue 8: stall under 5% of the synchronous torch.save; for the deferred mode the
stall is save()'s block plus the optimizer step's wait.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from easyckpt import Checkpointer  # noqa: E402


def build_state(size_mib: int, tensors: int, device: str) -> dict:
    numel = size_mib * (1 << 20) // 4 // tensors
    return {f"layer{i}": torch.rand(numel, device=device) for i in range(tensors)}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sync_save(state: dict, path: Path, durable: bool) -> None:
    with open(path, "wb") as f:
        torch.save(state, f)
        if durable:
            f.flush()
            os.fsync(f.fileno())


def sync_baselines(state: dict, work: Path, runs: int) -> tuple[list[float], list[float]]:
    """torch.save without and with fsync, alternating, one fresh file each (after a warm-up)."""
    sync_save(state, work / "warmup.pt", True)
    plain, durable = [], []
    for run in range(runs):
        for durable_run, times in ((False, plain), (True, durable)):
            path = work / f"sync-{run}-{durable_run}.pt"
            times.append(timed(lambda: sync_save(state, path, durable_run)))
            os.sync()  # let writeback finish so it does not bleed into the next timing
            path.unlink()
    return plain, durable


def stall_of(ckpt: Checkpointer, state: dict, runs: int) -> tuple[float, list[float]]:
    """(cold first save, steady-state saves); each write is awaited outside the timing."""
    times = []
    for step in range(runs + 1):
        times.append(timed(lambda: ckpt.save(step, state)))
        ckpt.wait()
    return times[0], times[1:]


def update_all(state: dict) -> None:
    for t in state.values():
        t.add_(1)


def cow_cost(ckpt: Checkpointer, state: dict, runs: int) -> tuple[list, list, list, int]:
    """In-place update times: right after save() (child alive), after a write, with no save.

    Also returns in how many runs the child was still writing when the update ended (otherwise
    part of the "during" update ran after the child exited, and cost less).
    """
    during, after, plain, child_outlived = [], [], [], 0
    for run in range(runs):
        ckpt.save(100 + run, state)
        during.append(timed(lambda: update_all(state)))
        writer = ckpt._writer  # peeking: was the child still holding the pages?
        child_outlived += writer is not None and writer.is_alive()
        ckpt.wait()
        ckpt.save(200 + run, state)
        ckpt.wait()
        after.append(timed(lambda: update_all(state)))
        plain.append(timed(lambda: update_all(state)))
    return during, after, plain, child_outlived


def update_during_copy_write(ckpt: Checkpointer, state: dict, runs: int) -> list[float]:
    """In-place update right after a copy-mode save(): same disk and CPU competition as in fork
    mode (the writer runs meanwhile), but no copy-on-write faults."""
    times = []
    for run in range(runs):
        ckpt.save(300 + run, state)
        times.append(timed(lambda: update_all(state)))
        ckpt.wait()
    return times


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def copy_floor(state: dict, runs: int) -> list[float]:
    pin = next(iter(state.values())).is_cuda
    bufs = [torch.empty(t.shape, dtype=t.dtype, pin_memory=pin) for t in state.values()]

    def copy_all():
        for b, t in zip(bufs, state.values()):
            b.copy_(t, non_blocking=pin)
        if pin:
            torch.cuda.synchronize()

    copy_all()  # fault the pages in
    return [timed(copy_all) for _ in range(runs)]


def gil_slowdown(ckpt: Checkpointer, state: dict) -> tuple[float, float]:
    """Median time of a small pure-Python work unit, idle vs while a write is in flight."""
    def unit():
        return timed(lambda: sum(range(200_000)))

    idle = statistics.median(unit() for _ in range(20))
    ckpt.save(10_000, state)
    busy = []
    writer = ckpt._writer  # peeking: only to stop measuring when the write ends
    while writer is not None and writer.is_alive() and len(busy) < 200:
        busy.append(unit())
    ckpt.wait()
    return idle, statistics.median(busy) if busy else float("nan")


class StepWaitProbe:
    """How long each optimizer step spends in the global pre-hooks registered after this probe's,
    i.e. in easyckpt's (registered at the first deferred save): from this probe's global pre-hook
    to the optimizer's own pre-hook, which torch runs after all global ones."""

    def __init__(self):
        self.waits: list[float] = []
        self._start = 0.0
        register_optimizer_step_pre_hook(self._begin)

    def watch(self, opt: torch.optim.Optimizer) -> None:
        opt.register_step_pre_hook(self._end)

    def _begin(self, opt, args, kwargs) -> None:
        self._start = time.perf_counter()

    def _end(self, opt, args, kwargs) -> None:
        self.waits.append(time.perf_counter() - self._start)


def sgd_over(state: dict, probe: StepWaitProbe) -> tuple[dict, torch.optim.Optimizer]:
    """The state's tensors as parameters (same storage), with small constant gradients."""
    params = {name: torch.nn.Parameter(t) for name, t in state.items()}
    for p in params.values():
        p.grad = torch.full_like(p, 1e-6)
    opt = torch.optim.SGD(params.values(), lr=1e-3)
    probe.watch(opt)
    return params, opt


def matmul_work(compute_ms: float, device: str):
    """A function doing about compute_ms of matmuls on tensors that are not in the state."""
    a, b = (torch.rand(1024, 1024, device=device) for _ in range(2))

    def unit():
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()

    unit()
    per_unit = statistics.median(timed(unit) for _ in range(10))
    units = max(1, round(compute_ms / 1000 / per_unit))
    return lambda: [unit() for _ in range(units)]


def training_loop(ckpt, params, opt, probe, compute, runs: int) -> list[dict]:
    """Per run: a step without a checkpoint (timed in its two parts); save() and the step after
    it; more steps until the write is over. Run 0 is the Checkpointer's first save, which
    allocates its buffer pool: the copy then also faults in the pool's pages."""
    def step():
        compute()
        opt.step()

    step()  # warm-up
    out = []
    for run in range(runs + 1):
        r = {"compute": timed(compute), "sgd": timed(opt.step)}
        t0 = time.perf_counter()
        ckpt.save(2000 + run, params)
        r["blocked"] = time.perf_counter() - t0
        step()
        r["step"] = time.perf_counter() - t0
        r["waited"] = probe.waits[-1]
        r["during"] = []
        writer = ckpt._writer  # peeking: only to know when the write is over
        while writer is not None and writer.is_alive():
            r["during"].append(timed(step))
        ckpt.wait()
        out.append(r)
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms".rjust(10)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=1024)
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dir", default=".", help="where to write (same disk as your checkpoints)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: default)")
    p.add_argument("--compute-ms", type=float, default=300,
                   help="non-mutating compute per training step (models forward + backward)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch.cuda.is_available() is False on this machine", file=sys.stderr)
        return 2

    probe = StepWaitProbe()  # before any deferred save registers easyckpt's hook
    work = Path(tempfile.mkdtemp(prefix=".bench-ckpt-", dir=args.dir))
    try:
        state = build_state(args.size_mib, args.tensors, args.device)
        print(f"state: {args.size_mib} MiB float32 in {args.tensors} tensors on {args.device}; "
              f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads; dir {work}")
        floor = copy_floor(state, args.runs)  # first, before the disk traffic below
        sync, durable = sync_baselines(state, work, args.runs)
        forks = args.device == "cpu" and hasattr(os, "fork")
        if forks:  # before the buffer pool exists: fork's cost grows with the whole RSS
            rss = rss_mib()
            with Checkpointer(work / "fork", keep=1, snapshot="fork") as ckpt:
                _, forked = stall_of(ckpt, state, args.runs)
                during, after, plain, outlived = cow_cost(ckpt, state, args.runs)
        with Checkpointer(work / "pool", keep=1, snapshot="copy") as ckpt:
            cold, pooled = stall_of(ckpt, state, args.runs)
            idle, busy = gil_slowdown(ckpt, state)
            copy_during = update_during_copy_write(ckpt, state, args.runs)
        with Checkpointer(work / "clone", keep=1, reuse_buffers=False, snapshot="copy") as ckpt:
            _, cloned = stall_of(ckpt, state, args.runs)
        params, opt = sgd_over(state, probe)
        compute = matmul_work(args.compute_ms, args.device)
        loops = {}
        with Checkpointer(work / "deferred", keep=1) as ckpt:
            deferred_cold, deferred = stall_of(ckpt, state, args.runs)
        for mode in ("deferred", "copy"):  # fresh Checkpointers: run 0 shows the cold pool
            with Checkpointer(work / f"loop-{mode}", keep=1, snapshot=mode) as ckpt:
                loops[mode] = training_loop(ckpt, params, opt, probe, compute, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    base, stall = med(sync), med(pooled)
    print(f"sync torch.save            {ms(base)}")
    print(f"sync torch.save + fsync    {ms(med(durable))}")
    if forks:
        print(f"save() stall, fork         {ms(med(forked))}   "
              f"= {med(forked) / base:6.1%} of torch.save (forked at RSS {rss:.0f} MiB)")
    print(f"save() stall, deferred     {ms(med(deferred))}   "
          f"= {med(deferred) / base:6.1%} of torch.save (first save: {ms(deferred_cold)}; "
          "the copy follows in the writer thread)")
    print(f"save() stall, buffer pool  {ms(stall)}   "
          f"= {stall / base:6.1%} of torch.save (first, allocating the pool: {ms(cold)})")
    clone = med(cloned)
    print(f"save() stall, clone()      {ms(clone)}   = {clone / base:6.1%} of torch.save")
    gib_s = args.size_mib / 1024 / med(floor)
    print(f"copy_ floor (bandwidth)    {ms(med(floor))}   = {gib_s:.1f} GiB/s")
    print("target: stall < 5% of torch.save "
          f"({ms(base * 0.05).strip()}); vs torch.save + fsync: fork "
          + (f"{med(forked) / med(durable):.1%}, " if forks else "n/a, ")
          + f"buffer pool {stall / med(durable):.1%}")
    if forks:
        print("in-place add_(1) of every tensor, fork mode:")
        print(f"  right after save()        {ms(med(during))}   "
              f"(child still writing at its end in {outlived}/{len(during)} runs)")
        print(f"  after the write completed {ms(med(after))}")
        print(f"  no save involved          {ms(med(plain))}")
        print(f"  (copy mode, right after save(), writer thread running: {ms(med(copy_during))})")
    print(f"pure-Python work unit: {ms(idle)} idle, {ms(busy)} during a background write (copy)")
    print(f"training loop: {args.compute_ms:.0f} ms of matmuls outside the state (forward + "
          "backward), then an SGD step over the state's tensors; save() at the start of a step")
    for mode, runs in loops.items():
        print_loop(mode, runs, base)
    return 0


def print_loop(mode: str, runs: list[dict], base: float) -> None:
    med = statistics.median
    cold, steady = runs[0], runs[1:]
    plain = med(r["compute"] + r["sgd"] for r in steady)
    stalls = [r["blocked"] + r["waited"] for r in steady]
    step = med(r["step"] for r in steady)
    extra = [sum(d - plain for d in r["during"]) for r in steady]
    print(f"  {mode}: step without a checkpoint {ms(plain).strip()} (matmuls "
          f"{ms(med(r['compute'] for r in steady)).strip()} + SGD step "
          f"{ms(med(r['sgd'] for r in steady)).strip()})")
    print(f"    first save (new pool)      save() {ms(cold['blocked']).strip()}, SGD step waited "
          f"{ms(cold['waited']).strip()}, step {ms(cold['step']).strip()}")
    print(f"    save() blocked             {ms(med(r['blocked'] for r in steady))}")
    print(f"    SGD step waited (hook)     {ms(med(r['waited'] for r in steady))}")
    print(f"    stall, save() + wait       {ms(med(stalls))}   = {med(stalls) / base:6.1%} of "
          f"torch.save (target < 5%: {'met' if med(stalls) < 0.05 * base else 'NOT met'}; "
          f"runs: {', '.join(f'{s / base:.1%}' for s in stalls)})")
    print(f"    step with save()           {ms(step)}   {(step - plain) * 1000:+.0f} ms "
          f"({step / plain - 1:+.0%}) against the step without a checkpoint")
    during = [d for r in steady for d in r["during"]]
    if not during:  # a small state is written before the loop takes its next step
        print("    steps while the write runs       none: each write ended before the next step")
        return
    print(f"    steps while the write runs {ms(med(during))}   "
          f"median, {med(len(r['during']) for r in steady):.0f} per write, "
          f"{med(extra) * 1000:+.0f} ms over the write in all")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
