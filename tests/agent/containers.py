"""Real container runtimes for the agent's tests: Podman from Debian (with deploy/podman/containers.conf,
the settings this kind of machine needs), and the Docker client speaking to Podman's Docker-compatible
API, since no Docker daemon runs here. A test image is built from Debian's static busybox without any
registry (../shared/notes/containers.md).

CI installs Podman (.ci/run), so there a missing runtime fails the tests instead of skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from agent.container import LABEL_AGENT, RuntimeNotFound, find_runtime

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = REPO / "deploy" / "podman" / "containers.conf"
IMAGE = "localhost/opendlc-test/busybox:1"
IMAGE_MARKER = "built for the OpenDLC agent tests"
BUSYBOX = Path("/bin/busybox")


def unavailable(why: str):
    if os.environ.get("CI"):
        pytest.fail(f"container tests must run in CI: {why}")
    pytest.skip(why)


# Set at import, so that the agents the end-to-end tests start as subprocesses read it too.
os.environ.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))


def podman_runtime():
    try:
        return find_runtime("podman")
    except RuntimeNotFound as exc:
        unavailable(str(exc))


def _busybox_root(root: Path) -> None:
    for d in ("bin", "tmp", "etc"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for applet in ("sh", "ls", "cat", "echo", "sleep", "nc", "tail", "head", "touch", "env", "kill", "ps", "seq"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "opendlc-image").write_text(IMAGE_MARKER + "\n")


def build_image(runtime, tmp: Path) -> str:
    """A busybox image with a file of its own, made with `podman import` (no registry needed)."""
    if subprocess.run([runtime.binary, "image", "inspect", IMAGE], capture_output=True).returncode == 0:
        return IMAGE
    if not BUSYBOX.exists():  # Debian's busybox-static: one binary that needs no library
        unavailable("Debian's busybox-static is needed to build the test image")
    root = tmp / "rootfs"
    _busybox_root(root)
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run([runtime.binary, "import", "-", IMAGE], stdin=tar.stdout, check=True, capture_output=True)
    tar.wait()
    return IMAGE


# Two pods of one job over the host network: rank 0 listens on MASTER_PORT until a connection carries
# something (under load one may carry nothing), the others send until it got through a few times.
MASTER_LISTENS = 'got=; while [ -z "$got" ]; do got=$(nc -l -p "$MASTER_PORT"); done; echo "master got: $got"'
WORKER_SENDS = ('ok=1; for i in $(seq 100); do echo "hello from $RANK" | nc "$MASTER_ADDR" "$MASTER_PORT" && ok=0; '
                '[ $ok = 0 ] && [ $i -ge 3 ] && exit 0; sleep 0.2; done; exit $ok')
PYTHON_IMAGE = "localhost/opendlc-test/python:1"
HOST_PYTHON = Path("/usr/bin/python3.11")


def build_python_image(runtime, tmp: Path) -> str:
    """The busybox image plus Debian's Python 3.11, its libraries and standard library: enough to
    run EasyCkpt's example inside a container, built from this machine's own files."""
    if subprocess.run([runtime.binary, "image", "inspect", PYTHON_IMAGE], capture_output=True).returncode == 0:
        return PYTHON_IMAGE
    if not HOST_PYTHON.exists() or not Path("/usr/lib/python3.11").is_dir():
        unavailable("Debian's python3.11 is needed to build the Python test image")
    root = tmp / "pyroot"
    _busybox_root(root)
    libs = subprocess.run(["ldd", str(HOST_PYTHON)], capture_output=True, text=True, check=True).stdout
    for path in [HOST_PYTHON, *(Path(w) for w in libs.split() if w.startswith("/"))]:
        (root / path.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path.resolve(), root / path.relative_to("/"))
    (root / "usr/bin/python3").symlink_to("python3.11")
    shutil.copytree("/usr/lib/python3.11", root / "usr/lib/python3.11", symlinks=True,
                    ignore=shutil.ignore_patterns("test", "__pycache__", "idlelib", "tkinter", "ensurepip"))
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run([runtime.binary, "import", "-", PYTHON_IMAGE], stdin=tar.stdout, check=True, capture_output=True)
    tar.wait()
    return PYTHON_IMAGE


def docker_through_podman(runtime, sock_dir: Path):
    """The Docker client against `podman system service` (Docker's API): (runtime, service process)."""
    if shutil.which("docker") is None:
        unavailable("no docker client on this machine")
    sock = sock_dir / "podman.sock"
    service = subprocess.Popen([runtime.binary, "system", "service", "--time=0", f"unix://{sock}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    os.environ["DOCKER_HOST"] = f"unix://{sock}"
    deadline = time.monotonic() + 30
    while True:
        try:
            return find_runtime("docker"), service
        except RuntimeNotFound:
            if time.monotonic() > deadline:
                service.kill()
                raise
            time.sleep(0.2)


def remove_containers(runtime, marker: str) -> None:
    names = subprocess.run([runtime.binary, "ps", "--all", "--quiet", "--filter", f"label={LABEL_AGENT}={marker}"],
                           capture_output=True, text=True).stdout.split()
    if names:
        subprocess.run([runtime.binary, "rm", "--force", *names], capture_output=True)
