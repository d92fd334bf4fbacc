"""A pod's datasets on a node: the URI grammar of a dataset, what a mount path may be, where a
dataset's URI is on this machine, and how the process runtime makes it appear at its mount path.

The platform checks URIs and mount paths with these same functions when a dataset or a job is
submitted (datasets/services.py, jobs/services.py), so what the API accepts is what an agent can do.
A `Mount` (host path -> path in the pod, read-only or not) is what any runtime needs: the process
runtime makes it a symbolic link; a container runtime bind-mounts it.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

FILE = "file"
NFS = "nfs"
SCHEMES = (FILE, NFS)
URI_FORMS = "file:///host/path or nfs://server/export/path"
MOUNTS_FILE = "/proc/mounts"
MAX_PATH = 1024


class MountError(Exception):
    """A dataset that cannot appear at its mount path on this node; the message says why."""


@dataclass(frozen=True)
class DatasetUri:
    scheme: str  # FILE or NFS
    server: str  # the NFS server; "" for a host path
    path: str  # absolute and normalized


def parse_uri(uri: str) -> DatasetUri:
    """`file:///data/imagenet` or `nfs://nas1/export/imagenet`; ValueError says what is allowed."""
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError(f"is required: {URI_FORMS}")
    parts = urlsplit(uri.strip())
    if parts.scheme not in SCHEMES:
        raise ValueError(f"must be {URI_FORMS}, got {uri!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"must have no query or fragment, got {uri!r}")
    path = unquote(parts.path)
    if parts.scheme == FILE and parts.netloc not in ("", "localhost"):
        raise ValueError(f"a host path has no host: file:///path, got {uri!r}")
    if parts.scheme == NFS and not parts.netloc:
        raise ValueError(f"an NFS export names its server: nfs://server/export/path, got {uri!r}")
    if problem := path_problem(path):
        raise ValueError(f"its path {problem}")
    return DatasetUri(parts.scheme, parts.netloc if parts.scheme == NFS else "", normalize(path))


def normalize(path: str) -> str:
    """`/mnt/data/` and `/mnt//data` are `/mnt/data`."""
    return posixpath.normpath(path).replace("//", "/")


def path_problem(path) -> str | None:
    """Why a path cannot be a mount path (or a dataset's path), or None when it can."""
    if not isinstance(path, str) or not path:
        return "is required: an absolute path such as /mnt/data"
    if not path.startswith("/"):
        return f"must be an absolute path such as /mnt/data, got {path!r}"
    if "\0" in path or len(path) > MAX_PATH:
        return f"must be at most {MAX_PATH} characters without NUL"
    if ".." in path.split("/"):
        return f"must not contain '..', got {path!r}"
    if normalize(path) == "/":
        return "must not be the root directory /"
    return None


def overlapping(paths: list[str]) -> tuple[str, str] | None:
    """Two mount paths that are the same or one inside the other (each already normalized)."""
    for i, a in enumerate(paths):
        for b in paths[i + 1:]:
            if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
                return a, b
    return None


@dataclass(frozen=True)
class Mount:
    source: str  # the host path
    target: str  # where the pod sees it
    read_only: bool
    what: str  # for messages: "dataset d-1 (nfs://nas1/export)"

    def as_dict(self) -> dict:
        return {"source": self.source, "target": self.target, "read_only": self.read_only, "what": self.what}


def host_path(uri: str, mounts_file: str = MOUNTS_FILE) -> str:
    """Where a dataset's URI is on this machine: a host path as it is; an NFS export where this node
    has it mounted (the process runtime does not mount file systems: that needs root, and a mount
    it made would outlive a crashed agent)."""
    parsed = parse_uri(uri)
    if parsed.scheme == FILE:
        return parsed.path
    try:
        with open(mounts_file) as f:
            table = f.read()
    except OSError as exc:
        raise MountError(f"cannot read {mounts_file} to find {uri}: {exc}") from None
    found = nfs_local_path(parsed, table)
    if found is None:
        raise MountError(f"{uri} is not mounted on this node; the process runtime does not mount NFS: "
                         f"mount {parsed.server}:{parsed.path} (or a directory above it) on the node first")
    return found


def nfs_local_path(uri: DatasetUri, mounts_table: str) -> str | None:
    """The local path of an NFS export in a /proc/mounts table, through the deepest mounted export
    that holds it; None when none does."""
    best = None
    for line in mounts_table.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[2].startswith("nfs") or ":" not in fields[0]:
            continue
        server, export = fields[0].split(":", 1)
        mountpoint = _unescape(fields[1])
        export = normalize(export or "/")
        if server != uri.server or not (uri.path == export or uri.path.startswith(export.rstrip("/") + "/")):
            continue
        if best is None or len(export) > len(best[0]):
            best = (export, mountpoint)
    if best is None:
        return None
    rest = uri.path[len(best[0]):].lstrip("/")
    return normalize(posixpath.join(best[1], rest)) if rest else best[1]


def _unescape(field: str) -> str:
    # /proc/mounts writes a space in a path as \040 (octal), and tab, newline and backslash likewise.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def link(mount: Mount) -> bool:
    """Make `mount.target` show `mount.source` for the process runtime, by a symbolic link.

    The target must be free or already lead there (another pod's link, or the host path itself);
    anything else stays as it is and the pod fails. Returns True when this call made the link."""
    if not os.path.exists(mount.source):
        raise MountError(f"{mount.what}: {mount.source} does not exist on this node")
    for _ in range(2):  # a second pod may make the same link at the same moment
        if os.path.lexists(mount.target):
            if os.path.realpath(mount.target) == os.path.realpath(mount.source):
                return False
            raise MountError(f"{mount.what}: {mount.target} already exists on this node and is not {mount.source}; "
                             "the process runtime mounts by a symbolic link and cannot mount over it")
        try:
            os.makedirs(os.path.dirname(mount.target), exist_ok=True)
            os.symlink(mount.source, mount.target)
            return True
        except FileExistsError:
            continue
        except OSError as exc:
            raise MountError(f"{mount.what}: cannot create {mount.target} on this node: {exc.strerror}") from None
    raise MountError(f"{mount.what}: {mount.target} keeps changing on this node")


def unlink(mount: Mount) -> None:
    """Remove a link `link` made, if it still leads where it did."""
    try:
        if os.path.islink(mount.target) and os.readlink(mount.target) == mount.source:
            os.unlink(mount.target)
    except OSError:
        pass
