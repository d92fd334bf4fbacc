"""Which world wrote a checkpoint, and whether another world may resume it.

A training job's state is one of two layouts, which the Checkpointer is told (`layout=`):

- "replicated" (the default): every rank holds the same state, as data-parallel replicas do
  (DDP: identical weights and optimizer state after every step). One copy is the whole state, so
  a checkpoint resumes at any world size: an elastic job shrunk from 8 workers to 4, or grown
  back, loads it as it is. The checkpoint lives in the Checkpointer's directory; any rank may
  write it (on a shared directory, let rank 0 alone save).
- "sharded": each rank holds its own part (ZeRO / FSDP optimizer or parameter shards, a
  pipeline stage): rank R's checkpoints live in `<dir>/rank-R`, and only the same world size can
  resume them. EasyCkpt does not reshard; load_latest refuses a mismatch with WorldSizeMismatch
  rather than resume from scratch or from a wrong shard.

The world size and rank are the `world_size` / `rank` arguments, else env WORLD_SIZE / RANK (what
torchrun and OpenDLC set), else 1 / 0. Each manifest records the world size and layout it was
written with; a manifest without them (written before) counts as replicated, world size 1.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPLICATED = "replicated"
SHARDED = "sharded"
LAYOUTS = (REPLICATED, SHARDED)
RANK_DIR_RE = re.compile(r"^rank-(\d+)$")


class WorldSizeMismatch(RuntimeError):
    """A checkpoint cannot be resumed by this world (a sharded state at another world size)."""


def from_env(world_size: int | None, rank: int | None) -> tuple[int, int]:
    size = world_size if world_size is not None else int(os.environ.get("WORLD_SIZE", "1"))
    me = rank if rank is not None else int(os.environ.get("RANK", "0"))
    if size < 1 or not 0 <= me < size:
        raise ValueError(f"rank must be 0 to world_size - 1 and world_size at least 1 "
                         f"(got rank {me}, world_size {size})")
    return size, me


def shard_dir(base: Path, layout: str, rank: int) -> Path:
    return base / f"rank-{rank}" if layout == SHARDED else base


def rank_dirs(base: Path) -> list[Path]:
    if not base.is_dir():
        return []
    return sorted(base / name for name in os.listdir(base) if RANK_DIR_RE.match(name))


def refuse_sharded(step: int, written: int, world: int) -> WorldSizeMismatch:
    return WorldSizeMismatch(
        f"easyckpt: checkpoint step {step} is sharded (each of its {written} ranks saved its own "
        f"part) and this run has {world} ranks: a sharded state resumes only at the world size "
        f"that wrote it. Resume with {written} ranks, reshard it yourself, or save data-parallel "
        f"replicas with layout='replicated', which resume at any world size")


def refuse_layout(found: str, asked: str, where: Path) -> WorldSizeMismatch:
    return WorldSizeMismatch(
        f"easyckpt: the checkpoints in {where} were saved with layout={found!r} and this "
        f"Checkpointer reads layout={asked!r}; give the layout they were written with")
