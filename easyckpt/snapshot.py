"""In-memory snapshot of a training state, taken between two steps.

    snap = Snapshotter()
    frozen, has_tensors = snap.take({"model": model.state_dict(), "step": 7})
    frozen, copies, events = snap.defer(state)     # tensors copied later: see `deferred`

dicts, lists and tuples are walked; PyTorch tensors found in them are copied to CPU memory that
this object keeps and reuses (pinned when the source is on a GPU, so the device-to-host copy can be
asynchronous); everything else is `copy.deepcopy`'d. The caller may change or free its state as
soon as `take` returns.

`defer` does the same walk but copies only what cannot wait: the plain objects, and tensors whose
changes cannot be detected (not strided, inference tensors, devices other than CPU and CUDA). For
a CPU tensor it returns a `TensorCopy` (source, buffer, version counter) for a thread to run later;
for a CUDA tensor it issues the asynchronous copy at once on a side stream (ordered after the work
already queued on the caller's stream) and returns an event per device that marks its end. The
returned `frozen` references the buffers, which hold their values only once the copies are done.

Why a buffer pool rather than `tensor.clone()`: clone allocates fresh memory every time, and the
kernel must fault in and zero each new page, while `copy_` into a buffer that already exists runs at
memory bandwidth (using torch's intra-op threads). The price is one resident CPU copy of the tensors
between saves; pass `reuse_buffers=False` to allocate per save instead.

The pool is overwritten by the next `take` or `defer`: the caller must not take a new snapshot
while the previous one is still being written (Checkpointer guarantees this).

Limits: tensors inside other objects (not dict/list/tuple) are deep-copied by torch itself (on
their own device); two views of one storage become two independent tensors.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Hashable
from dataclasses import dataclass


def tensor_devices(state: object) -> set[str]:
    """Device types ("cpu", "cuda", ...) of the tensors found in state's dicts, lists and tuples."""
    torch = sys.modules.get("torch")
    if torch is None:  # no tensor can exist without torch imported
        return set()
    found: set[str] = set()
    stack = [state]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            found.add(obj.device.type)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return found


@dataclass(frozen=True)
class TensorCopy:
    """One tensor of a deferred snapshot: copy `src` into `dst` while `src` still holds the values
    it had at save() time, i.e. while its version counter is still `version`."""

    key: tuple  # where it sits in the state, for messages: ("model", "fc.weight")
    src: object  # the caller's tensor, detached: same storage and same version counter
    dst: object  # its buffer in the snapshot
    version: int  # src._version when the snapshot was taken
    issued: bool  # a CUDA copy already issued on the side stream; done when its event is


class Snapshotter:
    def __init__(self, reuse_buffers: bool = True):
        self.reuse_buffers = reuse_buffers
        self._pool: dict[Hashable, object] = {}
        self._streams: dict[object, object] = {}  # CUDA device -> side stream of deferred copies

    def take(self, state: object) -> tuple[object, bool]:
        """Return (an independent copy of state, whether it holds tensors)."""
        frozen = self._start(state, later=None)
        for device in self._devices:
            self._torch.cuda.synchronize(device)  # the non_blocking copies must have landed
        return frozen, self._has_tensors

    def defer(self, state: object) -> tuple[object, list[TensorCopy], list]:
        """Return (the snapshot, the tensor copies still to run or to wait for, CUDA events)."""
        later: list[TensorCopy] = []
        frozen = self._start(state, later)
        events = []
        for device in self._devices:
            events.append(self._torch.cuda.Event())
            events[-1].record(self._streams[device])
        return frozen, later, events

    def _start(self, state: object, later: list | None) -> object:
        # Only look for tensors if the user already imported torch: importing it ourselves would
        # cost seconds for pure-Python states.
        self._torch = sys.modules.get("torch")
        self._devices: set = set()
        self._has_tensors = False
        self._later = later
        return self._walk(state, (), {})

    def _walk(self, obj: object, key: tuple, memo: dict) -> object:
        torch = self._torch
        if torch is not None and isinstance(obj, torch.Tensor):
            if id(obj) not in memo:  # tied weights stay one tensor
                memo[id(obj)] = self._copy_tensor(obj, key)
            return memo[id(obj)]
        if isinstance(obj, dict):
            new = copy.copy(obj)  # keeps the type and attributes, e.g. state_dict()._metadata
            for k, v in obj.items():
                new[k] = self._walk(v, (*key, k), memo)
            return new
        if type(obj) is list:
            return [self._walk(v, (*key, i), memo) for i, v in enumerate(obj)]
        if type(obj) is tuple:
            return tuple(self._walk(v, (*key, i), memo) for i, v in enumerate(obj))
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*(self._walk(v, (*key, i), memo) for i, v in enumerate(obj)))
        return copy.deepcopy(obj, memo)

    def _copy_tensor(self, tensor, key: tuple):
        self._has_tensors = True
        t = tensor.detach()
        if t.layout != self._torch.strided:  # sparse and friends: rare, take the simple path
            return t.to("cpu", copy=True)
        # Inference tensors have no version counter: a change could not be detected, copy now.
        deferred = self._later is not None and not t.is_inference()
        if t.is_cuda and deferred:
            return self._issue_gpu_copy(t, key)
        if t.is_cuda:
            self._devices.add(t.device)
        elif deferred and t.device.type == "cpu":
            buf = self._buffer(t, key)
            self._later.append(TensorCopy(key, t, buf, t._version, issued=False))
            return buf
        elif not self.reuse_buffers and t.device.type == "cpu":
            return t.clone()
        buf = self._buffer(t, key)
        buf.copy_(t, non_blocking=t.is_cuda)
        return buf

    def _buffer(self, t, key: tuple):
        """The pool's buffer for this key, (re)allocated when its shape or dtype changed."""
        on_gpu = t.is_cuda
        buf = self._pool.get((key, on_gpu)) if self.reuse_buffers else None
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            buf = self._torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=on_gpu)
            if self.reuse_buffers:
                self._pool[(key, on_gpu)] = buf
        return buf

    def _issue_gpu_copy(self, t, key: tuple):
        cuda = self._torch.cuda
        stream = self._streams.get(t.device)
        if stream is None:
            stream = self._streams[t.device] = cuda.Stream(t.device)
        if t.device not in self._devices:  # once per snapshot and device
            self._devices.add(t.device)
            # The copy must see every change already queued on the caller's stream.
            stream.wait_stream(cuda.current_stream(t.device))
        buf = self._buffer(t, key)
        with cuda.stream(stream):
            buf.copy_(t, non_blocking=True)
        # `t` stays referenced by the TensorCopy until the event is waited for, so the caching
        # allocator cannot hand its memory to another tensor while the side stream still reads it.
        self._later.append(TensorCopy(key, t, buf, t._version, issued=True))
        return buf
