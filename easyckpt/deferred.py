"""Deferred snapshots: save() returns at once, the tensors are copied while the next step computes.

    pending = PendingSnapshot("checkpoint step 7", frozen, copies, events, guard)
    install(pending)        # in the training thread, from save()
    pending.copy()          # in the writer thread: raises TornSnapshot if a tensor changed
    pending.verify()        # in the writer thread, just before the checkpoint is committed
    pending.finish()        # in the writer thread, when the write is over

This is the CheckFreq / Gemini split of a checkpoint: the snapshot overlaps the next step's
forward and backward passes, which read the weights but do not write them; only the first in-place
change has to wait for the copy. Copying is bound by memory bandwidth, so taking it inside save(),
as the "copy" mode does, cannot bring the stall under a few percent of torch.save.

Costs: the copy still takes memory bandwidth and a core, so a CPU-bound step slows down while it
runs; the first save of a Checkpointer allocates the buffer pool, and its copy also faults in the
pool's pages (seconds per GiB on a busy machine), which that one time the optimizer step waits
for; while a write is pending, every module call goes through torch's hook path (and a
`torch.compile(module)` warns once about global module hooks).

Consistency: a tensor must not change in place between save() and the moment it is copied. While a
snapshot is pending, two global hooks hold that line for the usual training loop:

1. before any `torch.optim` step (a global step pre-hook), wait until every tensor is copied;
2. before any module's forward, copy that module's buffers (and its submodules') right there in
   the training thread: BatchNorm updates its running statistics in the forward pass, before the
   optimizer step, and without bumping their version counters.

Code that changes state tensors in place some other way calls `Checkpointer.wait_snapshot()` first.

Safety net: every tensor's version counter (`t._version`, shared by a tensor, its detached copies
and its views, bumped by every in-place op) is recorded at save(). It is compared right after the
tensor is copied, again when a hook or `wait_snapshot()` lets the training thread go on, and for
the tensors no hook has vouched for, once more just before the checkpoint is committed. Any change
means the copy may be torn: the checkpoint is not written, a RuntimeWarning says which tensor, and
the next save/wait/close raises CheckpointWriteError. So a loop that changes tensors in place
without waiting loses that checkpoint even when the copy happened to be done first: we cannot tell
an in-place op that ran after the copy from one that was still running during it, because an op
bumps the counter when it ends. Limits: changes the counter never sees (writes through `.data`,
through numpy or DLPack aliases, BatchNorm's running statistics outside a module call) are not
detected; and an unsynchronized op that is still running when the payload has been written
(about the duration of a torch.save) is missed.

Deadlock rules: the training thread waits on the writer (in the hooks, and in the SIGTERM flush);
the writer waits on the training thread only for a copy that thread has under way, during which it
holds no lock. Every training-thread section that holds a snapshot's lock runs inside the
Checkpointer's `guard`, which defers a SIGTERM handler (it joins the writer) to the end of the
section; `_hooks_lock` is never taken by a writer.
"""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import AbstractContextManager
from typing import Callable

from easyckpt.snapshot import TensorCopy

PENDING, BUSY, DONE = "pending", "busy", "done"

_pending: set["PendingSnapshot"] = set()  # snapshots some write still depends on
_hooks_lock = threading.RLock()  # training threads only; reentrant for a SIGTERM handler
_optimizer_hook = None
_forward_hook = None


class TornSnapshot(RuntimeError):
    """A tensor changed in place while its snapshot was pending; the checkpoint is not written."""


def install(snapshot: "PendingSnapshot") -> None:
    """Gate in-place changes on `snapshot` until its write ends (call from the training thread)."""
    global _optimizer_hook, _forward_hook
    # A deferred snapshot holds tensors: torch, and these modules with it, are imported already.
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    with _hooks_lock:
        _pending.add(snapshot)
        if _optimizer_hook is None:  # for good: removing it could break an optimizer's hook loop
            _optimizer_hook = register_optimizer_step_pre_hook(_before_optimizer_step)
        if _forward_hook is None:
            _forward_hook = register_module_forward_pre_hook(_before_forward)


def _before_optimizer_step(optimizer, args, kwargs) -> None:
    for snapshot in list(_pending):
        snapshot.seal_all()


def _before_forward(module, args) -> None:
    global _forward_hook
    if not _pending:
        # Nothing pending: stop slowing every module call down. Safe during a module call, which
        # iterates over a copy of the global hooks.
        with _hooks_lock:
            if not _pending and _forward_hook is not None:
                _forward_hook.remove()
                _forward_hook = None
        return
    for snapshot in list(_pending):
        snapshot.before_forward(module)


def _forget_all_in_child() -> None:
    _pending.clear()  # a forked child has no writer thread: its hooks must not wait for one


os.register_at_fork(after_in_child=_forget_all_in_child)


class PendingSnapshot:
    def __init__(
        self,
        label: str,
        frozen: object,
        copies: list[TensorCopy],
        events: list,
        guard: Callable[[], AbstractContextManager],
    ):
        self.label = label  # "checkpoint step 7", for messages
        self.frozen = frozen  # what gets written, once the copies are done
        self.torn: str | None = None  # why it must not be written
        self._copies = copies
        self._events = events  # CUDA events: the issued copies are done when these are
        self._guard = guard
        self._status = [BUSY if c.issued else PENDING for c in copies]
        self._sealed = [False] * len(copies)  # vouched for by the training thread
        self._unsealed = len(copies)
        self._by_ptr: dict[int, list[int]] = {}
        for i, c in enumerate(copies):
            self._by_ptr.setdefault(c.src.data_ptr(), []).append(i)
        self._swept: set[int] = set()  # ids of modules whose buffers are already sealed
        self._cond = threading.Condition()
        self._copied = False  # the writer is through copying (all done, or it stopped)
        self._finished = False

    # --- writer thread ----------------------------------------------------------------------

    def copy(self, before_each: Callable[[], None] | None = None) -> None:
        """Copy every tensor the training thread has not taken over; raise TornSnapshot if one
        changed before its copy. `before_each` runs before each copy (a test hook)."""
        try:
            try:
                for i in range(len(self._copies)):
                    if self.torn:
                        break
                    if before_each:
                        before_each()
                    claimed = self._claim(i)
                    if claimed is not None:
                        self._copy(i, claimed, seal=False)
            finally:
                # Even after a failure: the side stream must be done reading the sources before
                # finish() lets go of them, and the training thread before we report.
                for event in self._events:
                    event.synchronize()
                self._issued_done()
                with self._cond:
                    self._cond.wait_for(lambda: BUSY not in self._status)
        finally:
            with self._cond:  # whatever happened, nobody waits for this copy any more
                self._copied = True
                self._cond.notify_all()
        if self.torn:
            raise TornSnapshot(self.torn)

    def verify(self) -> None:
        """Last check before the commit; from here on the training thread is free."""
        with self._cond:
            for i in range(len(self._copies)):
                self._check(i, seal=True)
        if self.torn:
            raise TornSnapshot(self.torn)

    def finish(self) -> None:
        """The write is over: stop gating, and let go of the caller's tensors and the snapshot."""
        _pending.discard(self)
        with self._cond:
            self._finished = self._copied = True
            self._unsealed = 0
            self._copies, self._by_ptr, self.frozen = [], {}, None
            self._cond.notify_all()

    # --- training thread --------------------------------------------------------------------

    def seal_all(self) -> None:
        """Wait until every tensor is copied; the state may then change in place."""
        if self._unsealed == 0:
            return
        with self._guard(), self._cond:
            self._cond.wait_for(lambda: self._copied)
            for i in range(len(self._copies)):
                self._check(i, seal=True)

    def before_forward(self, module) -> None:
        """Seal the buffers of `module` and its submodules, copying them here if need be."""
        if self._unsealed == 0 or id(module) in self._swept:
            return
        with self._guard():
            for sub in module.modules():
                self._swept.add(id(sub))
                for buf in sub._buffers.values():  # not buffers(): once per module, cheaply
                    if buf is not None:
                        self._seal_tensor(buf)

    def _seal_tensor(self, tensor) -> None:
        for i in self._by_ptr.get(tensor.data_ptr(), ()):
            with self._cond:
                if self._finished or self.torn or self._sealed[i]:
                    continue
                claimed = self._claim(i)
                if claimed is None:  # the writer is on it, or it is a CUDA copy in flight
                    self._cond.wait_for(lambda: self._status[i] == DONE or self._copied)
                    self._check(i, seal=True)
            if claimed is not None:
                self._copy(i, claimed, seal=True)

    # --- both -------------------------------------------------------------------------------

    def _claim(self, i: int) -> TensorCopy | None:
        with self._cond:  # reentrant: _seal_tensor holds it already
            if self._finished or self._status[i] != PENDING:
                return None
            self._status[i] = BUSY
            return self._copies[i]

    def _copy(self, i: int, c: TensorCopy, seal: bool) -> None:
        try:
            c.dst.copy_(c.src)  # releases the GIL: the training thread runs meanwhile
        finally:
            with self._cond:
                if not self._finished:
                    self._status[i] = DONE
                    # Only the training thread may seal: an op of its own cannot be running.
                    self._check(i, seal)
                self._cond.notify_all()

    def _issued_done(self) -> None:
        with self._cond:
            for i, c in enumerate(self._copies):
                if c.issued:
                    self._status[i] = DONE
                    self._check(i, seal=False)
            self._cond.notify_all()

    def _check(self, i: int, seal: bool) -> None:
        """Compare tensor i's version counter with save()'s; call with the lock held."""
        c = self._copies[i]
        if self._status[i] != DONE or self._sealed[i]:
            return
        if c.src._version != c.version:
            self._tear(c)
        elif seal:
            self._sealed[i] = True
            self._unsealed -= 1

    def _tear(self, c: TensorCopy) -> None:
        if self.torn:
            return
        where = "".join(f"[{k!r}]" for k in c.key)
        self.torn = (
            f"{self.label} is not written: tensor state{where} was changed in place while its "
            f"snapshot was pending (version {c.version} at save(), now {c.src._version}); call "
            "Checkpointer.wait_snapshot() before changing state tensors in place outside a "
            "torch.optim step"
        )
        warnings.warn(f"easyckpt: {self.torn}", RuntimeWarning, stacklevel=2)
