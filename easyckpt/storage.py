"""On-disk layout of a checkpoint directory: atomic writes, scan, verify, prune.

A checkpoint of step N is two files:

    step-N.ckpt   the payload (torch.save or pickle output)
    step-N.json   its manifest: {"step", "file", "format", "size", "crc32", "time",
                                 "world_size", "layout"} (the world that wrote it: world.py)

The payload is written to a hidden temp file, fsynced and renamed into place; the manifest is
written the same way *after* it. The manifest is the commit marker: a step without one, or whose
payload does not match the manifest's size and CRC-32, is not a checkpoint. A crash at any point
therefore leaves either the previous checkpoints or the new one, never a torn file that loads.

CRC-32 guards against torn and corrupted files, not against tampering; SHA-256 would cost the
background writer several times more CPU for no gain here.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

MANIFEST_RE = re.compile(r"^step-(\d+)\.json$")
PAYLOAD_RE = re.compile(r"^step-(\d+)\.ckpt$")
TMP_PREFIX = ".tmp-"
CHUNK = 1 << 20

# hook(stage, path) is called where the payload is written (the writer thread, or the forked
# child in fork mode, where a hook can only raise or end that process): "chunk" before each payload
# write (path is the temp file), "manifest" after the payload is renamed into place and before its
# manifest. The Checkpointer adds "copy", before the writer thread copies each tensor of a deferred
# snapshot (path is the final payload's). Tests use it to block or kill the writer at a precise
# point; production passes None.
Hook = Callable[[str, Path], None]


@dataclass(frozen=True)
class Manifest:
    step: int
    file: str
    format: str
    size: int
    crc32: int
    time: float
    world_size: int = 1  # absent from manifests written before: one replicated process
    layout: str = "replicated"


class _ChecksummingWriter:
    """File wrapper that counts and checksums every byte on its way to disk."""

    def __init__(self, f: BinaryIO, path: Path, hook: Hook | None):
        self._f, self._path, self._hook = f, path, hook
        self.size = 0
        self.crc32 = 0

    def write(self, data) -> int:
        if self._hook:
            self._hook("chunk", self._path)
        self.crc32 = zlib.crc32(data, self.crc32)
        self.size += memoryview(data).nbytes
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()


def fsync_dir(directory: Path) -> None:
    """Make renames and unlinks inside `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tmp_path(directory: Path, final_name: str) -> Path:
    return directory / f"{TMP_PREFIX}{final_name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Readers see the old file or the new one, never half of it."""
    tmp = _tmp_path(path.parent, path.name)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def payload_path(directory: Path, step: int) -> Path:
    return directory / f"step-{step}.ckpt"


def manifest_path(directory: Path, step: int) -> Path:
    return directory / f"step-{step}.json"


def write_checkpoint(
    directory: Path,
    step: int,
    fmt: str,
    serialize: Callable[[BinaryIO], None],
    hook: Hook | None = None,
    before_commit: Callable[[], None] | None = None,
    world_size: int = 1,
    layout: str = "replicated",
) -> Path:
    """Write one checkpoint durably and return its payload path.

    1. serialize into a temp file, flush, fsync; call before_commit, which may still refuse the
       checkpoint by raising (the temp file is then removed and nothing else changed);
    2. drop an existing manifest of the same step (its payload is about to be replaced);
    3. rename the payload into place, fsync the directory;
    4. write the manifest atomically and durably: from here on the step is complete.
    """
    final = payload_path(directory, step)
    tmp = _tmp_path(directory, final.name)
    try:
        with open(tmp, "wb") as f:
            writer = _ChecksummingWriter(f, tmp, hook)
            serialize(writer)
            f.flush()
            os.fsync(f.fileno())
        if before_commit:
            before_commit()
        manifest_path(directory, step).unlink(missing_ok=True)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    if hook:
        hook("manifest", final)
    manifest = Manifest(step, final.name, fmt, writer.size, writer.crc32, time.time(), world_size,
                        layout)
    atomic_write_bytes(manifest_path(directory, step), json.dumps(manifest.__dict__).encode())
    return final


def complete_steps(directory: Path) -> list[int]:
    """Steps that have a manifest, oldest first (not yet verified)."""
    if not directory.is_dir():
        return []
    found = (MANIFEST_RE.match(name) for name in os.listdir(directory))
    return sorted(int(m.group(1)) for m in found if m)


def read_manifest(directory: Path, step: int) -> Manifest | None:
    try:
        raw = json.loads(manifest_path(directory, step).read_bytes())
        return Manifest(**raw)
    except (OSError, ValueError, TypeError):
        return None


def verify(directory: Path, manifest: Manifest) -> bool:
    """True when the payload has exactly the size and CRC-32 its manifest recorded."""
    if manifest.file != payload_path(directory, manifest.step).name:
        return False  # a manifest never points outside its own step's payload
    path = directory / manifest.file
    try:
        if path.stat().st_size != manifest.size:
            return False
        crc = 0
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                crc = zlib.crc32(chunk, crc)
    except OSError:
        return False
    return crc == manifest.crc32


def prune(directory: Path, keep: int) -> None:
    """Keep the newest `keep` complete steps; remove older ones, orphans and stale temp files.

    Call only when no write of this directory is in flight: temp files are removed too.
    """
    steps = complete_steps(directory)
    kept = set(steps[-keep:])
    for step in steps:
        if step not in kept:
            # Manifest first: a crash in between leaves an orphan payload, never a manifest
            # that points at nothing.
            manifest_path(directory, step).unlink(missing_ok=True)
            payload_path(directory, step).unlink(missing_ok=True)
    for name in os.listdir(directory):
        m = PAYLOAD_RE.match(name)
        # Only our own temp files: progress.json's may be mid-write in another thread.
        stale_tmp = name.startswith(TMP_PREFIX + "step-")
        if stale_tmp or (m and int(m.group(1)) not in kept):
            (directory / name).unlink(missing_ok=True)
