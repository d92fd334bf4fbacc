"""Copy-on-write snapshots: write a checkpoint from a forked child process.

    child = forked.start(write)       # returns right after fork(); write() runs in the child
    forked.reap(child)                # later, in a parent thread: raises what write() raised

fork() gives the child the parent's memory as it is at that instant; the kernel shares the pages
and copies one only when either process writes to it. The child serializes that frozen image and
exits; the parent carries on training at once. This is how Redis BGSAVE and CheckFreq-style
checkpointers snapshot without copying the state up front.

Trade-off against the copy snapshot (`Snapshotter`):

- Stall: fork copies the parent's page tables, proportional to its whole RSS (not just the state)
  at one entry per 4 KiB page, which is cheaper than copying the state but not free, and costs
  more on some hypervisors. The copy stall grows with the state, the fork stall with the RSS.
- Afterwards: every page the parent writes while the child still holds it is copied on a page fault,
  4 KiB at a time. A training step that rewrites all weights right after save() therefore pays one
  copy of the state plus a fault per page, spread over the step, and even after the child has exited
  the first write to each page still faults (no copy); measured, that step pays far more than a
  copy-mode save (docs/performance.md). So fork moves cost out of save() into the next steps rather
  than removing it: prefer it when the step after a save does not rewrite most of the state, or when
  the buffer pool's copy does not fit.
- Memory: no resident buffer pool (the copy mode keeps one CPU copy of the tensors between
  saves); at worst, when the parent rewrites everything before the child ends, one extra copy.

Fork safety. A child forked from a threaded process holds only the forking thread; a lock that
another thread held at fork time stays locked forever in it. So the child only serializes and
writes: no logging or printing (stdio locks), no progress-file update (its lock), no CUDA (a CUDA
context does not survive fork; callers never fork when CUDA is initialized), one torch thread,
garbage collection off, SIGTERM/SIGINT ignored (the parent decides when to stop, and waits for the
child). It leaves through os._exit, so no atexit handler or inherited buffer runs twice. Errors go
back to the parent as a pickled exception on a pipe, at most PIPE_BUF bytes so the write never
blocks.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import sys
from dataclasses import dataclass
from typing import Callable, NoReturn

MAX_REPORT = 4096  # PIPE_BUF on Linux: one write into an empty pipe never blocks


class WriterDied(RuntimeError):
    """The child process ended without a report: killed by a signal, or exited oddly."""


@dataclass(frozen=True)
class Child:
    pid: int
    report_fd: int  # read end of the pipe the child reports its exception on


def available() -> bool:
    return hasattr(os, "fork")


def start(write: Callable[[], None]) -> Child:
    """Fork; the child runs write() on its copy-on-write image and exits."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child_main(write, write_fd)
    os.close(write_fd)
    return Child(pid, read_fd)


def reap(child: Child) -> None:
    """Wait for the child; return if write() succeeded, else raise what it raised."""
    try:
        _, status = os.waitpid(child.pid, 0)
        report = _read_report(child.report_fd)
    finally:
        os.close(child.report_fd)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return
    if report:
        raise _unpickle(report)
    if code < 0:
        raise WriterDied(f"writer process {child.pid} was killed by {signal.Signals(-code).name}")
    raise WriterDied(f"writer process {child.pid} exited with status {code} and no report")


def _child_main(write: Callable[[], None], report_fd: int) -> NoReturn:
    code = 1
    try:
        _settle_child()
        write()
        code = 0
    except BaseException as exc:  # noqa: BLE001 -- everything goes back to the parent
        _send_report(report_fd, exc)
    finally:
        os._exit(code)  # skip atexit, finalizers and inherited stdio buffers


def _settle_child() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent's handler would flush from here
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()  # a collection writes to every object header: pointless page copies
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)  # the parent's intra-op pool did not survive fork


def _send_report(fd: int, exc: BaseException) -> None:
    try:
        data = pickle.dumps(exc)
    except Exception:  # noqa: BLE001 -- an unpicklable exception still gets reported
        data = b""
    if not data or len(data) > MAX_REPORT:
        data = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"[:MAX_REPORT // 2]))
    os.write(fd, data)


def _read_report(fd: int) -> bytes:
    # The child has exited, so its report (if any) is in the pipe already. Do not wait for EOF:
    # a process forked elsewhere in the meantime may hold a copy of the write end.
    ready, _, _ = select.select([fd], [], [], 0)
    return os.read(fd, MAX_REPORT * 2) if ready else b""


def _unpickle(report: bytes) -> BaseException:
    try:
        exc = pickle.loads(report)  # from our own child: trusted
    except Exception as err:  # noqa: BLE001
        return WriterDied(f"writer process failed with an unreadable report ({err})")
    return exc if isinstance(exc, BaseException) else WriterDied(repr(exc))
