"""A torch.distributed group that an elastic job resizes in place: the workers that stay keep
their processes, and only re-form their group with the new world.

OpenDLC restarts an elastic job's workers at every resize unless the job asks for ResizeInPlace
(docs/design.md, "Resizing in place"); then the platform tells each kept worker its new
membership through the file its OPENDLC_MEMBERSHIP_FILE names (JSON: generation, rank,
world_size, master_addr, master_port), starts the new workers of a growth with that generation in
their environment (OPENDLC_ELASTIC_GENERATION, RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and
stops the workers a shrink takes. Rank 0 stays the same process in every generation; it hosts the
job's TCPStore at MASTER_ADDR:MASTER_PORT, and generation G's process group rendezvouses under
the store prefix "gen{G}/".

The training loop::

    group = easyckpt.ElasticGroup()              # joins the group of its start generation
    group.sync(model, optimizer)                 # every rank starts from rank 0's state
    while True:
        if group.poll():                         # top of each step: re-formed since the last call?
            group.sync(model, optimizer)         # (and rebuild DDP here if it wraps the model)
        try:
            loss = step(model, optimizer)        # its collectives run in the current group
        except RuntimeError as error:            # a peer left: the shrink's workers were stopped
            group.recover(error)                 # the next generation's group, or the error again
            group.sync(model, optimizer)

Without OPENDLC_MEMBERSHIP_FILE (not an in-place job, or not on OpenDLC) the group is fixed:
poll() is always False and recover() re-raises, so the same code runs anywhere.

Growing without a stall: the new workers take seconds to start (importing torch, and on a GPU
initialising CUDA), and the kept ones go on training in the old group meanwhile. Every member of
generation G announces itself in the store (a new worker when constructed, a kept one when it
reads G in its file); once all world_size of them have, rank 0 writes at the top of its step t
that the group switches at step t + 1, before step t's collective. Every other rank checks at
the top of each step, and a rank at the top of step t + 1 has finished step t's collective, which
rank 0 entered only after that write; so every rank learns the switch by step t + 1 and none
earlier than step t, and all leave the old group after the same step, as a collective needs.
This holds while each step calls poll() once and runs at least one collective of the group.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Membership:
    """A worker's place in one generation of the job's group."""

    generation: int
    rank: int
    world_size: int
    master_addr: str
    master_port: int

    @classmethod
    def from_env(cls, env) -> Membership:
        missing = [n for n in ("MASTER_ADDR", "MASTER_PORT") if not env.get(n)]
        if missing:
            raise ValueError(f"easyckpt.ElasticGroup needs {' and '.join(missing)} in the environment "
                             "(OpenDLC and torchrun set them)")
        member = cls(int(env.get("OPENDLC_ELASTIC_GENERATION") or 0), int(env.get("RANK") or 0),
                     int(env.get("WORLD_SIZE") or 1), env["MASTER_ADDR"], int(env["MASTER_PORT"]))
        return member.checked()

    @classmethod
    def read(cls, path: Path) -> Membership | None:
        """The membership in the file, or None while there is none (the agent replaces it whole)."""
        try:
            data = json.loads(path.read_text())
            return cls(int(data["generation"]), int(data["rank"]), int(data["world_size"]),
                       str(data["master_addr"]), int(data["master_port"])).checked()
        except FileNotFoundError:
            return None

    def checked(self) -> Membership:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be 0 to world_size - 1 and world_size at least 1 "
                             f"(got rank {self.rank}, world_size {self.world_size})")
        return self


class ElasticGroup:
    """The job's default process group (torch.distributed's), re-formed in place at each resize."""

    def __init__(self, *, backend: str = "gloo", timeout_s: float = DEFAULT_TIMEOUT_S, env=None):
        import torch.distributed as dist

        env = os.environ if env is None else env
        self.backend, self.timeout_s = backend, timeout_s
        self.membership = Membership.from_env(env)
        self._file = Path(env["OPENDLC_MEMBERSHIP_FILE"]) if env.get("OPENDLC_MEMBERSHIP_FILE") else None
        self._seen: tuple[int, int] | None = None  # the file's (mtime_ns, size) when last read
        self._pending: Membership | None = None  # a newer generation this worker was told of
        self._switch_at: int | None = None
        self._steps = 0  # poll() calls since the group formed: the same on every rank
        # Rank 0's process serves the store for the job's lifetime; it never leaves a generation.
        self.store = dist.TCPStore(self.membership.master_addr, self.membership.master_port,
                                   is_master=self.membership.rank == 0, wait_for_workers=False,
                                   timeout=timedelta(seconds=timeout_s))
        self._announce(self.membership.generation)
        self._form(self.membership)

    @property
    def rank(self) -> int:
        return self.membership.rank

    @property
    def world_size(self) -> int:
        return self.membership.world_size

    @property
    def generation(self) -> int:
        return self.membership.generation

    def poll(self) -> bool:
        """Call at the top of each training step. True when the group was re-formed since the last
        call: the caller syncs its state (sync()) before the step. Non-blocking unless it switches."""
        if self._file is None:
            return False
        self._steps += 1
        self._read_file()
        pending = self._pending
        if pending is None:
            return False
        key = f"gen{pending.generation}/switch_at"
        if self._switch_at is None:
            if self.rank == 0:
                if self.store.add(f"gen{pending.generation}/arrived", 0) >= pending.world_size:
                    self._switch_at = self._steps + 1
                    self.store.set(key, str(self._switch_at))
            elif self.store.check([key]):
                self._switch_at = int(self.store.get(key))
        if self._switch_at is not None and self._steps >= self._switch_at:
            self._form(pending)
            return True
        return False

    def recover(self, error: BaseException) -> None:
        """After a collective of the current group failed (a peer left: a shrink stopped it), wait
        up to timeout_s for a newer generation and form its group; else raise `error` again, since
        then a peer failed rather than the job being resized, and the platform's fault tolerance
        takes over when this worker fails."""
        if self._file is None:
            raise error
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._read_file()
            if self._pending is not None:
                break
            if time.monotonic() >= deadline:
                raise error
            time.sleep(0.05)
        self._form(self._pending)

    def sync(self, *modules_or_optimizers) -> None:
        """Give every rank rank 0's state: modules' parameters and buffers, optimizers' state."""
        import torch.distributed as dist

        for thing in modules_or_optimizers:
            if hasattr(thing, "param_groups"):  # an optimizer: a new worker has no state to match
                state = self.broadcast_object(thing.state_dict() if self.rank == 0 else None)
                if self.rank != 0:
                    thing.load_state_dict(state)
            else:
                for tensor in thing.state_dict().values():
                    dist.broadcast(tensor, src=0)

    def broadcast_object(self, value):
        """Rank 0's value of a Python object (a step counter, an optimizer's state), on every rank."""
        import io

        import torch
        import torch.distributed as dist

        # torch.save, not broadcast_object_list: that one needs NumPy, which a training image may lack.
        device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else None
        payload = b""
        if self.rank == 0:
            buffer = io.BytesIO()
            torch.save(value, buffer)
            payload = buffer.getvalue()
        size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
        dist.broadcast(size, src=0)
        data = (torch.frombuffer(bytearray(payload), dtype=torch.uint8) if self.rank == 0
                else torch.empty(int(size.item()), dtype=torch.uint8))
        data = data.to(device) if device is not None else data
        dist.broadcast(data, src=0)
        if self.rank == 0:
            return value
        return torch.load(io.BytesIO(bytes(data.cpu().untyped_storage())), weights_only=False)

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> ElasticGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------------

    def _read_file(self) -> None:
        """Note a newer generation from the membership file, announcing this worker in it."""
        try:
            stat = os.stat(self._file)
        except FileNotFoundError:
            return
        if (stat.st_mtime_ns, stat.st_size) == self._seen:
            return
        self._seen = (stat.st_mtime_ns, stat.st_size)
        found = Membership.read(self._file)
        newest = self._pending or self.membership
        if found is not None and found.generation > newest.generation:
            self._pending, self._switch_at = found, None
            self._announce(found.generation)

    def _announce(self, generation: int) -> None:
        self.store.add(f"gen{generation}/arrived", 1)

    def _form(self, member: Membership) -> None:
        import torch.distributed as dist
        from torch.distributed import PrefixStore

        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group(self.backend, store=PrefixStore(f"gen{member.generation}/", self.store),
                                rank=member.rank, world_size=member.world_size,
                                timeout=timedelta(seconds=self.timeout_s))
        self.membership, self._pending, self._switch_at, self._steps = member, None, None, 0
