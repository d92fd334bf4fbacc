"""How long does Checkpointer.save() block training, versus a synchronous torch.save?

    python bench/checkpoint_stall.py                    # 1 GiB of CPU float32 in 16 tensors
    python bench/checkpoint_stall.py --device cuda      # same state on the GPU
    python bench/checkpoint_stall.py --size-mib 256 --runs 3 --dir /mnt/nvme/tmp

Prints medians over --runs: the synchronous baseline (torch.save, and torch.save + fsync, which is
what durability costs), the time save() blocks the caller with the reusable buffer pool (steady
state, plus the first, cold save that allocates the pool), with per-save clone() allocation, the
raw copy_ time of the state (the memory-bandwidth floor for any copy-based snapshot), and how much
a pure-Python loop slows down while the background write runs (GIL contention).
Target from issue 8: steady-state stall under 5% of the synchronous torch.save.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

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
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch.cuda.is_available() is False on this machine", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix=".bench-ckpt-", dir=args.dir))
    try:
        state = build_state(args.size_mib, args.tensors, args.device)
        print(f"state: {args.size_mib} MiB float32 in {args.tensors} tensors on {args.device}; "
              f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads; dir {work}")
        floor = copy_floor(state, args.runs)  # first, before the disk traffic below
        sync, durable = sync_baselines(state, work, args.runs)
        with Checkpointer(work / "pool", keep=1) as ckpt:
            cold, pooled = stall_of(ckpt, state, args.runs)
            idle, busy = gil_slowdown(ckpt, state)
        with Checkpointer(work / "clone", keep=1, reuse_buffers=False) as ckpt:
            _, cloned = stall_of(ckpt, state, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    base, stall = med(sync), med(pooled)
    print(f"sync torch.save            {ms(base)}")
    print(f"sync torch.save + fsync    {ms(med(durable))}")
    print(f"save() stall, buffer pool  {ms(stall)}   (first, allocating the pool: {ms(cold)})")
    print(f"save() stall, clone()      {ms(med(cloned))}")
    gib_s = args.size_mib / 1024 / med(floor)
    print(f"copy_ floor (bandwidth)    {ms(med(floor))}   = {gib_s:.1f} GiB/s")
    print(f"ratio stall / torch.save         {stall / base:6.1%}   (target < 5%)")
    print(f"ratio stall / torch.save + fsync {stall / med(durable):6.1%}")
    print(f"pure-Python work unit: {ms(idle)} idle, {ms(busy)} during a background write")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
