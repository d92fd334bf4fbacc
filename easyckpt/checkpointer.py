"""Checkpointer: snapshot in memory, write in the background, resume after a restart.

    from easyckpt import Checkpointer

    ckpt = Checkpointer()                    # dir from env OPENDLC_CKPT_DIR, else ./checkpoints
    start, state = ckpt.load_latest() or (0, init_state())
    ckpt.install_sigterm_handler(lambda: (step, state))   # final flush on preemption
    for step in range(start + 1, total + 1):
        state = train_one_step(state)
        if step % 100 == 0:
            ckpt.save(step, state)           # returns at once: tensors are copied meanwhile
    ckpt.close()                             # waits for the last write

Rule of the default "deferred" mode: do not change the state's tensors in place between save() and
the end of their copy. torch.optim steps and module forward passes wait for it by themselves; any
other in-place change (a hand-written update, `t.mul_()` in a loop) calls `ckpt.wait_snapshot()`
first. A change that slips through costs that checkpoint, never its integrity (see below).

One write at a time. A `save` issued while the previous write is still running WAITS for it, then
snapshots. We do not coalesce (drop the older pending save for the newer one) because: every save
the user asked for becomes durable, in order; only one snapshot's worth of memory is ever held
(coalescing needs a second buffer set, i.e. another copy of the model); and a save interval shorter
than the disk's write time shows up as a visible stall instead of silently lost checkpoints.

Snapshot modes (`snapshot=`):

- "deferred" (default): save() deep-copies the plain objects, records which tensors to copy (and
  their version counters) and returns; the writer thread copies the tensors into reusable CPU
  buffers (`Snapshotter`) while the next step's forward and backward passes run, then writes.
  Global hooks hold torch.optim steps back until the copy is done, and copy a module's buffers
  before its forward pass changes them (BatchNorm statistics). A tensor changed in place anyway
  is caught by its version counter: that checkpoint is not written, a RuntimeWarning names the
  tensor and the next save/wait/close raises CheckpointWriteError (rules and limits: `deferred`).
  CUDA tensors are copied into pinned buffers on a side stream; the hooks wait for its event. A
  state without tensors is deep-copied in save(), as in "copy".
- "copy" copies the tensors into the same buffers inside save(), then writes from a thread: no
  rule on in-place changes, but save() blocks for a full copy, which is bound by memory bandwidth
  (a fraction of a synchronous torch.save, but still a stall).
- "fork" forks a child that writes the copy-on-write image of the process (`forked`; trade-offs
  there: the stall is a page-table copy proportional to RSS, and the parent pays a page-fault copy
  for every page it rewrites while the child still runs). It also forks plain-Python states, but
  copies when CUDA is in play.
- "auto" forks when the state holds tensors, all on the CPU, CUDA is not initialized and os.fork
  exists, and copies otherwise: a CUDA context cannot be used in a forked child, so GPU state must
  be copied off the device by the parent anyway, and a plain-Python state deep-copies faster than
  a process forks.

Every mode writes with the same atomic protocol; in fork mode the parent records the progress file
and prunes once the child has exited, so the child takes no lock a parent thread could hold.
Measured on our microVM (bench/checkpoint_stall.py), fork cuts the stall of save() but the step
after it, when it rewrites every weight, pays far more in copy-on-write faults than the copy
mode's whole stall, so fork is opt-in: choose "fork" or "auto" for a loop that rewrites little of
its state between saves (see `forked`). "deferred" takes the copy out of save() and overlaps it
with the next step's compute; the optimizer step waits only for what is left of it.

World size (`world`): an elastic job resumes at another world size than it saved at. A
"replicated" state (data-parallel replicas, the default) loads at any world size and
`loaded_world_size` says which one wrote it; a "sharded" state (each rank its own part) lives
in one directory per rank and load_latest raises WorldSizeMismatch at another world size.

Format: torch.save when the state holds tensors (torch is then already imported by the caller),
pickle otherwise. Loading uses torch.load(weights_only=False): these files are written by this
library for this job, and the full unpickler is needed for the plain objects next to the tensors.
Never point load_latest at a directory that untrusted users can write to.
"""

from __future__ import annotations

import pickle
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Callable

from easyckpt import deferred, forked, progress, storage, world
from easyckpt.progress import checkpoint_dir, progress_path, record_checkpoint
from easyckpt.snapshot import Snapshotter, tensor_devices

GetState = Callable[[], "tuple[int, Any] | None"]
SNAPSHOT_MODES = ("deferred", "copy", "fork", "auto")


class CheckpointWriteError(RuntimeError):
    """A background write failed; raised by the next save/wait/close/load_latest."""


def _dump(fmt: str, obj: object, f: BinaryIO) -> None:
    if fmt == "torch":
        sys.modules["torch"].save(obj, f)
    else:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)


def _load(fmt: str, path: Path) -> object:
    if fmt == "torch":
        import torch

        return torch.load(path, weights_only=False)  # our own file: see module docstring
    with open(path, "rb") as f:
        return pickle.load(f)


class Checkpointer:
    def __init__(
        self,
        dir: str | Path | None = None,
        keep: int = 3,
        *,
        reuse_buffers: bool = True,
        snapshot: str = "deferred",
        hook: storage.Hook | None = None,
        layout: str = world.REPLICATED,
        world_size: int | None = None,
        rank: int | None = None,
    ):
        if keep < 1:
            raise ValueError(
                f"keep must be at least 1 (got {keep}): it is how many checkpoints stay on disk"
            )
        if snapshot not in SNAPSHOT_MODES:
            raise ValueError(f"snapshot must be one of {SNAPSHOT_MODES} (got {snapshot!r})")
        if snapshot == "fork" and not forked.available():
            raise ValueError(
                "snapshot='fork' needs os.fork, which this platform lacks; use 'deferred', "
                "'copy' or 'auto'"
            )
        if layout not in world.LAYOUTS:
            raise ValueError(f"layout must be one of {world.LAYOUTS} (got {layout!r}): "
                             "'replicated' for data-parallel replicas, 'sharded' for per-rank parts")
        self.snapshot = snapshot
        self.layout = layout
        self.world_size, self.rank = world.from_env(world_size, rank)
        self.base_dir = checkpoint_dir(dir)
        self.dir = world.shard_dir(self.base_dir, layout, self.rank)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.loaded_world_size: int | None = None  # the world that wrote what load_latest loaded
        self.keep = keep
        self.progress_file = progress_path(self.dir)
        progress.default_file = self.progress_file  # where easyckpt.report_progress() writes
        self._snapshotter = Snapshotter(reuse_buffers)
        self._hook = hook  # fault injection for tests, see storage.Hook (runs in the fork child)
        self._lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self._pending: deferred.PendingSnapshot | None = None  # the last deferred snapshot
        self._error: tuple[int, BaseException] | None = None
        self._last_durable: int | None = None
        self._main_busy = False
        self._term_pending = False
        self._get_state: GetState | None = None
        self._prev_handler: Any = None

    # --- public API -------------------------------------------------------------------------

    def save(self, step: int, state: object) -> None:
        """Snapshot `state` now and write it as checkpoint `step` in the background."""
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a non-negative int (got {step!r})")
        with self._critical():
            self._join_writer()  # at most one write (thread or child) in flight
            devices = tensor_devices(state)
            fmt = "torch" if devices else "pickle"
            child = self._fork(step, fmt, state) if self._forks(devices) else None
            if child is not None:
                target, args = self._reap, (step, child)
            elif self.snapshot == "deferred" and devices:
                target, args = self._copy_and_write, (step, fmt, self._defer(step, state))
            else:
                frozen, _ = self._snapshotter.take(state)
                target, args = self._write, (step, fmt, frozen)
            # Not a daemon: interpreter exit waits for the write instead of tearing it.
            self._writer = threading.Thread(target=target, args=args, name=f"easyckpt-step-{step}")
            try:
                self._writer.start()
            except BaseException:  # e.g. no thread left: nothing may wait for this snapshot
                self._writer = None
                if self._pending is not None:
                    self._pending.finish()
                raise

    def wait_snapshot(self) -> None:
        """Block until the tensors of the last save() are copied; they may then change in place.

        Only needed in "deferred" mode, before changing state tensors in place other than through
        a torch.optim step or a module's forward pass (both wait by themselves). Does not wait for
        the write, and does not raise: a failure surfaces in the next save/wait/close.
        """
        pending = self._pending
        if pending is not None:
            pending.seal_all()

    def wait(self) -> None:
        """Block until the write in flight (if any) is durable; raise if it failed."""
        with self._critical():
            self._join_writer()

    def close(self) -> None:
        """Flush, and give SIGTERM back to whoever had it before us."""
        self.wait()
        if self._get_state is not None and threading.current_thread() is threading.main_thread():
            # None: the previous handler was not installed from Python; the default is closest.
            signal.signal(signal.SIGTERM, self._prev_handler or signal.SIG_DFL)
            self._get_state = None

    def steps(self) -> list[int]:
        """Steps committed on disk (manifest written), oldest first; not verified."""
        return storage.complete_steps(self.dir)

    def load_latest(self) -> tuple[int, Any] | None:
        """(step, state) of the newest complete checkpoint that verifies, or None.

        Checkpoints whose payload does not match their manifest are skipped with a warning. A
        checkpoint that verifies but fails to unpickle (e.g. a class was renamed) raises: falling
        back silently to an older one would lose work without anyone noticing.
        """
        self.wait()
        self._check_world()
        for step in reversed(self.steps()):
            manifest = storage.read_manifest(self.dir, step)
            if manifest is None or manifest.step != step or not storage.verify(self.dir, manifest):
                warnings.warn(
                    f"easyckpt: skipping checkpoint step {step} in {self.dir}: its payload does "
                    "not match its manifest (torn or corrupted write)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            if manifest.layout != self.layout:
                raise world.refuse_layout(manifest.layout, self.layout, self.dir)
            if self.layout == world.SHARDED and manifest.world_size != self.world_size:
                raise world.refuse_sharded(step, manifest.world_size, self.world_size)
            state = _load(manifest.format, self.dir / manifest.file)
            self.loaded_world_size = manifest.world_size
            self._last_durable = step  # a SIGTERM before the next step need not rewrite it
            return step, state
        return None

    def _check_world(self) -> None:
        """Refuse what would silently start over: another rank's shard written by another world
        size (this rank's own directory may be new or stale), or checkpoints of the other layout."""
        if self.layout == world.SHARDED:
            for other in world.rank_dirs(self.base_dir):
                steps = storage.complete_steps(other)
                manifest = storage.read_manifest(other, steps[-1]) if steps else None
                if manifest is not None and manifest.world_size != self.world_size:
                    raise world.refuse_sharded(manifest.step, manifest.world_size, self.world_size)
            if not self.steps() and storage.complete_steps(self.base_dir):
                raise world.refuse_layout(world.REPLICATED, self.layout, self.base_dir)
        elif not self.steps() and any(storage.complete_steps(d) for d in world.rank_dirs(self.dir)):
            raise world.refuse_layout(world.SHARDED, self.layout, self.dir)

    def install_sigterm_handler(self, get_state: GetState) -> bool:
        """On SIGTERM: wait for the write in flight, save get_state() unless that step is already
        durable, call the previous handler, then exit with status 143 (128 + SIGTERM).

        get_state returns (step, state) or None. Returns False, with a warning, when called
        outside the main thread: Python only lets the main thread install signal handlers.
        """
        if threading.current_thread() is not threading.main_thread():
            warnings.warn(
                "easyckpt: SIGTERM handler not installed: only the main thread can install "
                "signal handlers; call install_sigterm_handler from the main thread",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        if self._get_state is None:  # installing twice must not chain us to ourselves
            self._prev_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._get_state = get_state
        return True

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals --------------------------------------------------------------------------

    @contextmanager
    def _critical(self):
        with self._busy(), self._lock:
            yield

    @contextmanager
    def _busy(self):
        # A signal handler runs in the main thread between two bytecodes, possibly in the middle
        # of our own save(), or while a deferred snapshot's hook holds its lock. Mark the main
        # thread busy so the handler defers to the end of the section instead of re-entering
        # (which would deadlock on a lock the writer needs, or reuse half-filled buffers). The
        # flag is raised before taking any lock and lowered after releasing it, so there is no
        # instant where the handler could find a lock held by the very thread it interrupted.
        outer = threading.current_thread() is threading.main_thread() and not self._main_busy
        if outer:
            self._main_busy = True
        try:
            yield
        finally:
            if outer:
                self._main_busy = False
        if outer and self._term_pending:
            self._on_sigterm(signal.SIGTERM, None)

    def _join_writer(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._error is not None:
            (step, exc), self._error = self._error, None
            message = f"writing checkpoint step {step} to {self.dir} failed: {exc}"
            raise CheckpointWriteError(message) from exc

    def _forks(self, devices: set[str]) -> bool:
        if self.snapshot in ("copy", "deferred") or not forked.available() or devices - {"cpu"}:
            return False
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            return False  # the child cannot use CUDA; pinned host memory is CUDA's too
        return self.snapshot == "fork" or bool(devices)

    def _fork(self, step: int, fmt: str, state: object) -> forked.Child | None:
        try:
            return forked.start(partial(self._write_payload, step, fmt, state))
        except OSError as exc:  # e.g. ENOMEM under strict overcommit: the copy still works
            warnings.warn(f"easyckpt: fork failed ({exc}); copying the state instead",
                          RuntimeWarning, stacklevel=3)
            return None

    def _defer(self, step: int, state: object) -> deferred.PendingSnapshot:
        frozen, copies, events = self._snapshotter.defer(state)
        label = f"checkpoint step {step}"
        self._pending = deferred.PendingSnapshot(label, frozen, copies, events, self._busy)
        deferred.install(self._pending)  # the hooks now hold in-place changes back
        return self._pending

    def _write_payload(
        self, step: int, fmt: str, frozen: object, before_commit: Callable | None = None
    ) -> Path:
        serialize = partial(_dump, fmt, frozen)
        return storage.write_checkpoint(
            self.dir, step, fmt, serialize, self._hook, before_commit=before_commit,
            world_size=self.world_size, layout=self.layout,
        )

    def _copy_and_write(self, step: int, fmt: str, pending: deferred.PendingSnapshot) -> None:
        hook = self._hook
        copying = partial(hook, "copy", storage.payload_path(self.dir, step)) if hook else None
        try:
            pending.copy(copying)
            path = self._write_payload(step, fmt, pending.frozen, pending.verify)
            self._committed(step, path)
        except BaseException as exc:  # surfaced in the training thread by the next call
            self._error = (step, exc)
        finally:
            pending.finish()

    def _write(self, step: int, fmt: str, frozen: object) -> None:
        try:
            self._committed(step, self._write_payload(step, fmt, frozen))
        except BaseException as exc:  # surfaced in the training thread by the next call
            self._error = (step, exc)

    def _reap(self, step: int, child: forked.Child) -> None:
        try:
            try:
                forked.reap(child)
            except ChildProcessError:
                # Someone else reaped our child (SIGCHLD set to SIG_IGN): the commit marker,
                # written last by the child, is the only word on whether it finished.
                if storage.read_manifest(self.dir, step) is None:
                    raise
            self._committed(step, storage.payload_path(self.dir, step))
        except BaseException as exc:
            self._error = (step, exc)

    def _committed(self, step: int, path: Path) -> None:
        self._last_durable = step
        record_checkpoint(self.progress_file, step, path)
        storage.prune(self.dir, self.keep)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        if self._main_busy:
            self._term_pending = True
            return
        self._term_pending = False
        self._final_flush()
        prev = self._prev_handler
        if callable(prev):
            prev(signum, frame)
        if prev is signal.SIG_IGN:
            return
        raise SystemExit(128 + signum)

    def _final_flush(self) -> None:
        try:
            self.wait()
        except CheckpointWriteError as exc:  # still try to save the current state
            print(f"easyckpt: SIGTERM: {exc}", file=sys.stderr, flush=True)
        got = self._get_state() if self._get_state else None
        if got is not None and got[0] != self._last_durable:
            self.save(*got)
            self.wait()
        step = self._last_durable
        print(f"easyckpt: SIGTERM: checkpoint step {step} is durable", file=sys.stderr, flush=True)
