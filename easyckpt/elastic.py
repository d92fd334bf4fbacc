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

    group = easyckpt.ElasticGroup()                     # joins the group of its start generation
    step = group.resync(model, optimizer, value=step)   # every rank from rank 0's state and step
    while True:
        if group.poll():                                # top of each step: re-formed since the last call?
            step = group.resync(model, optimizer, value=step)  # (rebuild DDP here if it wraps the model)
        try:
            loss = train_step(model, optimizer)         # its collectives run in the current group
        except RuntimeError as error:                   # a peer left: a shrink stopped it
            group.recover(error)                        # the next generation's group, or the error again
            step = group.resync(model, optimizer, value=step)
            continue
        step += 1

A new worker runs the same code: its constructor returns once the kept workers have switched to
its generation, and its first resync() meets their resync() after poll() or recover(). A shrink
may stop a peer during a resync too (a worker's start-up is long, and the platform resizes
whenever capacity moves): resync() then recovers and starts over by itself. Every rank of the old
group fails in some collective of it, and each follows its recover() with a whole resync(), so all
meet in the new generation at the same collective.

Without OPENDLC_MEMBERSHIP_FILE (not an in-place job, or not on OpenDLC) the group is fixed:
poll() is always False and recover() re-raises, so the same code runs anywhere. A lost peer is a
RuntimeError (gloo raises no narrower type); recover() re-raises any other error after timeout_s.

How the ranks agree (Switch). Every member of generation G announces itself in the store
("gen{G}/arrived"): a new worker when constructed, just before it waits in G's rendezvous, and a
kept worker when its file first names G. Only rank 0 decides: once all world_size members of G
have arrived (of the generations it knows, the newest such G), it writes "gen{C}/next" =
(G, t + 1) at the top of its step t in the group of generation C, before step t's collective.
The other ranks read that key at the top of each step once they know of a newer generation, and
switch at the step it names. A rank at the top of step t + 1 has finished step t's collective,
which rank 0 entered only after the write, so every rank has read the key by then: all leave C
after the same step, for the generation rank 0 named. Each rank has that generation's membership
(it was counted among the arrived only after reading it), even when the platform writes a newer
generation meanwhile (that one comes next). This holds while each step calls poll() once and
runs at least one collective of the group.

Shrinking: the stopped workers' connections close and a collective of the old group raises.
recover() leaves the broken group at once (so peers still waiting in it fail now rather than at
its timeout), then waits up to timeout_s for rank 0 to name the next generation (rank 0 names
the newest one all of whose members arrived, with step 0: at once), and forms it; else it raises
the collective's error again. A group's connections close only once nothing holds it: drop a
DDP wrapper before recover(), or peers waiting in the broken group wait out its timeout.
recover() is tested with gloo only: with backend="nccl", PyTorch tears the process down by
default when a collective fails (TORCH_NCCL_ASYNC_ERROR_HANDLING), before recover() can run.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Self

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


def arrived_key(generation: int) -> str:
    return f"gen{generation}/arrived"


def next_key(generation: int) -> str:
    return f"gen{generation}/next"


class Switch:
    """Which generation a worker's group switches to, and at which of its steps: rank 0 decides
    and the other ranks follow (the argument is in the module docstring). Keeps no process group;
    `store` is the job's store (any torch.distributed Store)."""

    def __init__(self, store, current: Membership):
        self.store, self.current = store, current
        self.told: dict[int, Membership] = {}  # newer generations this worker's file named
        self.decided: tuple[int, int] | None = None  # rank 0's (generation, step to switch at)
        self.steps = 0  # steps since the current group formed: the same count on every rank

    def tell(self, member: Membership) -> None:
        """The membership file names `member`: count this worker as arrived in its generation."""
        if member.generation > max(self.told, default=self.current.generation):
            self.told[member.generation] = member
            self.store.add(arrived_key(member.generation), 1)

    def at_step(self) -> Membership | None:
        """At the top of a step: the membership to switch to before it, or None to stay."""
        self.steps += 1
        self._decide(self.steps + 1)
        if self.decided is not None and self.steps >= self.decided[1]:
            return self._target()
        return None

    def after_failure(self) -> Membership | None:
        """The current group broke: the membership to form now, or None while undecided."""
        self._decide(0)  # rank 0 has left the broken group: a rank still in it switches at once
        return None if self.decided is None else self._target()

    def formed(self, member: Membership) -> None:
        self.current, self.decided, self.steps = member, None, 0
        self.told = {g: m for g, m in self.told.items() if g > member.generation}

    def _decide(self, step: int) -> None:
        if self.decided is not None or not self.told:
            return
        key = next_key(self.current.generation)
        if self.current.rank == 0:
            ready = self._newest_ready()
            if ready is not None:
                # Written before this step's collective: the ordering argument rests on it.
                self.store.set(key, f"{ready} {step}")
                self.decided = (ready, step)
        elif self.store.check([key]):
            generation, at = self.store.get(key).decode().split()
            self.decided = (int(generation), int(at))

    def _newest_ready(self) -> int | None:
        for generation in sorted(self.told, reverse=True):
            if self.store.add(arrived_key(generation), 0) >= self.told[generation].world_size:
                return generation
        return None

    def _target(self) -> Membership:
        generation = self.decided[0]
        if generation not in self.told:
            raise RuntimeError(f"easyckpt: rank 0 switched the group from generation "
                               f"{self.current.generation} to {generation}, which this worker's "
                               f"membership file never named: it is not one of its members")
        return self.told[generation]


class ElasticGroup:
    """The job's default process group (torch.distributed's), re-formed in place at each resize."""

    def __init__(self, *, backend: str = "gloo", timeout_s: float = DEFAULT_TIMEOUT_S, env=None):
        import torch.distributed as dist

        # Its functions bind group.WORLD as a default argument at import, and torch.optim imports
        # it lazily: imported after a group forms, it would keep that group's connections open past
        # destroy_process_group, and peers still waiting in the group would not be let go.
        import torch.distributed.nn.functional  # noqa: F401

        env = os.environ if env is None else env
        self.backend, self.timeout_s = backend, timeout_s
        member = Membership.from_env(env)
        file = env.get("OPENDLC_MEMBERSHIP_FILE")
        self._file = Path(file) if file else None
        self._seen: tuple[int, int, int] | None = None  # the file's (inode, mtime_ns, size)
        # Rank 0's process serves the store for the job's lifetime; it never leaves a generation.
        self.store = dist.TCPStore(member.master_addr, member.master_port, is_master=member.rank == 0,
                                   wait_for_workers=False, timeout=timedelta(seconds=timeout_s))
        # A new worker of a growth counts as arrived before it waits in its generation's rendezvous.
        self.store.add(arrived_key(member.generation), 1)
        self._switch = Switch(self.store, member)
        self._form(member)

    @property
    def membership(self) -> Membership:
        return self._switch.current

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
        """Call once at the top of each training step. True when the group was re-formed: the
        caller syncs its state (resync()) before the step. Without a resize it stats the membership
        file and, while a newer generation is pending, makes one store round trip."""
        if self._file is None:
            return False
        self._read_file()
        member = self._switch.at_step()
        if member is None:
            return False
        self._form(member)
        return True

    def recover(self, error: BaseException) -> None:
        """After a collective of the current group failed (a peer left: a shrink stopped it), wait
        up to timeout_s for the next generation and form its group; else raise `error` again, since
        then a peer failed rather than the job being resized, and the platform's fault tolerance
        takes over when this worker fails."""
        if self._file is None:
            raise error
        # The failed collective's frames hold the group: cleared, leaving closes its connections,
        # and peers still waiting in it fail now rather than at its timeout.
        traceback.clear_frames(error.__traceback__)
        self._leave()
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._read_file()
            member = self._switch.after_failure()
            if member is not None:
                break
            if time.monotonic() >= deadline:
                raise error
            time.sleep(0.05)
        self._form(member)

    def sync(self, *things) -> None:
        """Give every rank rank 0's state, in place: modules (parameters and buffers), optimizers
        (their state), and state dicts or lists of tensors."""
        import torch
        import torch.distributed as dist

        for thing in things:
            if hasattr(thing, "param_groups"):  # an optimizer: a new worker has no state to match
                state = self.broadcast_object(thing.state_dict() if self.rank == 0 else None)
                if self.rank != 0:
                    thing.load_state_dict(state)
                continue
            tensors = thing.state_dict() if hasattr(thing, "state_dict") else thing
            for tensor in tensors.values() if isinstance(tensors, Mapping) else tensors:
                if not isinstance(tensor, torch.Tensor):
                    raise TypeError(f"easyckpt: sync() copies tensors in place and got a "
                                    f"{type(tensor).__name__}; share Python values with "
                                    f"broadcast_object()")
                dist.broadcast(tensor, src=0)

    def resync(self, *things, value=None):
        """sync(*things), then rank 0's `value` on every rank (broadcast_object): what every rank
        does when the group forms or re-forms. A peer lost meanwhile is recovered from (recover())
        and the whole resync starts over in the next generation; without a membership file the
        error is raised, as recover() raises it."""
        while True:
            try:
                self.sync(*things)
                return self.broadcast_object(value)
            except RuntimeError as error:
                self.recover(error)

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
        self._leave()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------------

    def _read_file(self) -> None:
        """Tell the switch of the membership file's generation when the agent replaced the file."""
        try:
            stat = os.stat(self._file)
        except FileNotFoundError:
            return
        # The inode too: the agent's os.replace makes a new one, and two writes in one mtime tick
        # may have the same size.
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        self._seen = seen
        found = Membership.read(self._file)
        if found is not None:
            self._switch.tell(found)

    def _leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def _form(self, member: Membership) -> None:
        import torch.distributed as dist
        from torch.distributed import PrefixStore

        self._leave()
        dist.init_process_group(self.backend, store=PrefixStore(f"gen{member.generation}/", self.store),
                                rank=member.rank, world_size=member.world_size,
                                timeout=timedelta(seconds=self.timeout_s))
        self._switch.formed(member)
