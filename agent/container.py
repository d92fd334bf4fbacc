"""The container executor: each pod is one OCI container of its role's image, run by Podman or Docker.

The life of a pod is the process executor's (agent/process.py: start and stop messages, logs and
progress shipped from <pod root>/<job_id>/<pod_id>/pod.log, a state file, reconcile at start); what
differs is how a pod is prepared, started, stopped and judged:

- prepare: the image is pulled unless the runtime has it (with the job's ImageConfig credentials in
  a private auth file, `agent/images.py`); a pull that fails fails the pod at once, ImagePullFailed
  with the runtime's message. Datasets and the code source are bind-mounted, not linked.
- start: `create` (env from a 0600 file deleted once the container exists, so no value is ever on a
  command line), then `start --attach`, whose output is the pod's log and whose end is the pod's.
  PID 1 is a small shell that passes SIGTERM to every process of the pod, as the process runtime's
  group signal does, so EasyCkpt's flush on SIGTERM works inside the container too.
- stop: the runtime's `stop --time <grace>`: SIGTERM, the grace period, SIGKILL.
- judge: the exit code and OOMKilled from `inspect`; where the runtime cannot see an out-of-memory
  kill (cgroup v1 hosts), the kernel's own record of it, which names the container's cgroup.
- reconcile: containers carry the agent's label; a restarted agent adopts the running ones it
  knows, reports the ones that ended while it was away, and removes the ones nobody owns.

Both runtimes are driven through their command-line clients, which take the same verbs and flags but
for GPUs (CDI devices for Podman, `--gpus` for Docker): see docs/design.md for why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent import images, procs
from agent.metrics import Target, gpu_indices
from agent.mounts import Mount
from agent.outbox import Outbox
from agent.process import PodProcess, ProcessExecutor
from agent.sources import DATA_SOURCE_FAILED, SourceError, pod_mounts

log = logging.getLogger(__name__)

RUNTIMES = ("podman", "docker")
LABEL_AGENT = "io.opendlc.agent"
LABEL_POD = "io.opendlc.pod"
LABEL_JOB = "io.opendlc.job"
IMAGE_PULL_FAILED = "ImagePullFailed"
START_FAILED = "StartError"
OOM_KILLED = "OOMKilled"
DEFAULT_SHM_MIB = 8192
PULL_TIMEOUT_S = 1800
CLI_TIMEOUT_S = 120
# Podman settings for hosts where its defaults cannot start a container (deploy/podman/containers.conf).
PODMAN_HOST_CONF = Path(__file__).resolve().parent.parent / "deploy" / "podman" / "containers.conf"
KMSG = "/dev/kmsg"
ENV_FILE = ".opendlc-env"
# PID 1 of every pod: runs the command as its child and, on SIGTERM, passes it to the whole process
# group (a namespace's PID 1 gets no default signal action, and a shell that is not PID 1 would not
# pass the signal on); it then waits for the command and exits with its exit code. A `wait` the trap
# interrupted returns 143 whatever the command does, so the trap's flag sends it round once more to
# read the command's own status (the shell keeps it even when the command already ended).
WRAPPER = ('trap \'stopping=1; trap "" TERM; kill -TERM 0 2>/dev/null\' TERM; '
           '/bin/sh -c "$1" & pid=$!; '
           'while :; do stopping=; wait "$pid"; rc=$?; [ -z "$stopping" ] && break; done; exit "$rc"')


class RuntimeNotFound(Exception):
    """The container runtime asked for is not usable on this node."""


@dataclass(frozen=True)
class Runtime:
    name: str  # "podman" | "docker"
    binary: str  # the client's absolute path

    def gpu_flags(self, indices: list[int]) -> list[str]:
        """Exactly the node's GPUs of these NVML indices, the way each runtime takes them."""
        if not indices:
            return []
        if self.name == "podman":  # CDI names, after `nvidia-ctk cdi generate` on the host
            return [arg for i in indices for arg in ("--device", f"nvidia.com/gpu={i}")]
        # Docker reads --gpus as CSV: the quotes keep "device=0,1" one field.
        return ["--gpus", '"device=' + ",".join(str(i) for i in indices) + '"']

    def pull_args(self, image: str, auth: Path | None) -> list[str]:
        if self.name == "podman":
            return [self.binary, "pull", "--quiet", *(["--authfile", str(auth)] if auth else []), image]
        return [self.binary, *(["--config", str(auth.parent)] if auth else []), "pull", "--quiet", image]


def find_runtime(name: str) -> Runtime:
    """The runtime of that name, or RuntimeNotFound saying why it cannot be used."""
    if name not in RUNTIMES:
        raise RuntimeNotFound(f"runtime must be one of {', '.join(RUNTIMES)}, got {name!r}")
    binary = shutil.which(name)
    if binary is None:
        raise RuntimeNotFound(f"{name} is not installed on this node")
    try:
        done = subprocess.run([binary, "info", "--format", "{{json .}}"], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeNotFound(f"`{name} info` did not answer within 30 s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeNotFound(f"`{name} info` failed: {last}")
    if name == "podman" and "CONTAINERS_CONF" not in os.environ:
        why = podman_defaults_fail(done.stdout)
        if why and shutil.which("runc"):
            # Every later podman call of this agent inherits it, as if the operator had exported it.
            os.environ["CONTAINERS_CONF"] = str(PODMAN_HOST_CONF)
            log.warning("podman's defaults cannot start containers here (%s): using %s", why, PODMAN_HOST_CONF)
    return Runtime(name, binary)


def podman_defaults_fail(info_json: str, *, nr_open_path: str = "/proc/sys/fs/nr_open",
                         raise_limit=None) -> str | None:
    """Why Podman's defaults would fail to start any container on this host, or None.

    Two known causes, both met on VMs and CI sandboxes: Podman run as root raises the container's
    open-files limit to the kernel's maximum, which some sandboxes forbid even to root; and crun
    refuses a host that mixes cgroup v1 and v2 ("hybrid mode").
    """
    try:
        host = json.loads(info_json).get("host", {})
    except ValueError:
        host = {}
    runtime = (host.get("ociRuntime") or {}).get("name", "")
    if host.get("cgroupVersion") == "v1" and runtime == "crun" and os.path.isdir("/sys/fs/cgroup/unified"):
        return "crun cannot run on cgroups in hybrid mode"
    if os.geteuid() == 0:
        try:
            limit = int(Path(nr_open_path).read_text())
        except (OSError, ValueError):
            return None
        try:
            (raise_limit or _raise_nofile_in_child)(limit)
        except PermissionError:
            return f"raising the open-files limit to {limit} is not permitted"
    return None


def _raise_nofile_in_child(limit: int) -> None:
    """Try, in a child process so that the agent's own limits stay as they are, what Podman would do."""
    probe = ("import resource, sys\n"
             "try:\n"
             f"    resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))\n"
             "except (ValueError, OSError):\n"
             "    sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    if done.returncode == 3:
        raise PermissionError(limit)


def default_runtime() -> Runtime | None:
    """Podman or Docker, whichever works here (in that order: Podman needs no daemon); None: neither."""
    for name in RUNTIMES:
        try:
            return find_runtime(name)
        except RuntimeNotFound as exc:
            log.info("container runtime %s not used: %s", name, exc)
    return None


def container_name(pod_id: str, marker: str) -> str:
    """The pod's name, with a tag of the agent's: two agents on one host (or a test's leftovers) never
    claim the same name."""
    tag = hashlib.sha256(marker.encode()).hexdigest()[:8]
    return f"opendlc-{''.join(c if c.isalnum() or c in '_.-' else '-' for c in pod_id)}-{tag}"


def container_env(spec: dict) -> dict[str, str]:
    """The pod's environment inside its container: the platform's and the job's variables, with
    CUDA_VISIBLE_DEVICES counted from 0, since the container sees only its own GPUs, renumbered."""
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    env.setdefault("OPENDLC_POD_ID", spec["pod_id"])
    env.setdefault("OPENDLC_JOB_ID", str(spec["job_id"]))
    gpus = gpu_indices(env)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
    # With NVIDIA's runtime hook a variable left empty may mean every GPU: "void" means none.
    env["NVIDIA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpus) or "void"
    return env


def create_args(runtime: Runtime, spec: dict, *, name: str, marker: str, env_file: Path, env_names: list[str],
                mounts: list[Mount], ckpt_dir: str) -> list[str]:
    """The `create` command of a pod's container (pure: tests read it as the runtime would)."""
    resources = spec.get("resources") or {}
    cpu_m, mem_mib = int(resources.get("cpu_m") or 0), int(resources.get("mem_mib") or 0)
    args = [
        runtime.binary, "create", "--name", name, "--pull", "never",
        "--label", f"{LABEL_AGENT}={marker}", "--label", f"{LABEL_POD}={spec['pod_id']}",
        "--label", f"{LABEL_JOB}={spec['job_id']}",
        "--env-file", str(env_file), *[arg for n in env_names for arg in ("--env", n)],
        "--stop-signal", "SIGTERM", "--entrypoint", "/bin/sh",
        # PyTorch's data loaders share tensors through /dev/shm, which runtimes size at 64 MiB.
        "--shm-size", f"{mem_mib or DEFAULT_SHM_MIB}m",
    ]
    if cpu_m:
        args += ["--cpus", f"{cpu_m / 1000:g}"]
    if mem_mib:  # no swap beyond the limit: the pod is killed at its memory, not slowed past it
        args += ["--memory", f"{mem_mib}m", "--memory-swap", f"{mem_mib}m"]
    if int((spec.get("env") or {}).get("WORLD_SIZE") or 1) > 1:
        args += ["--network", "host"]  # MASTER_ADDR is the first pod's node: its port must be the node's
    args += runtime.gpu_flags(gpu_indices(spec.get("env") or {}))
    for mount in [*mounts, Mount(ckpt_dir, ckpt_dir, False, "checkpoints")]:
        args += ["--mount", f"type=bind,source={mount.source},target={mount.target}"
                            + (",readonly" if mount.read_only else "")]
    return [*args, spec["image"], "-c", WRAPPER, "opendlc-pod", spec["command"]]


def kernel_oom_killed(container_id: str, kmsg: str = KMSG) -> bool:
    """Whether the kernel's log records an out-of-memory kill in this container's cgroup (its
    `oom-kill:` line names the memory cgroup, which holds the container's id). False when the log
    cannot be read."""
    if not container_id:
        return False
    needle = container_id.encode()
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return False
            except BrokenPipeError:  # a record was overwritten while we read: go on with the next
                continue
            if not record:
                return False
            if b"oom-kill:" in record and needle in record:
                return True
    finally:
        os.close(fd)


class ContainerExecutor(ProcessExecutor):
    def __init__(self, node: str, pod_root: Path, outbox: Outbox, runtime: Runtime, *,
                 ship_interval_s: float = 1.0, pull_timeout_s: float = PULL_TIMEOUT_S, kmsg: str = KMSG):
        super().__init__(node, pod_root, outbox, ship_interval_s=ship_interval_s)
        self.runtime = runtime
        self.kind = runtime.name
        self.pull_timeout_s = pull_timeout_s
        self.kmsg = kmsg
        self._main_pids: dict[str, int] = {}

    # -- prepare: image and mounts ---------------------------------------------------------------

    def _running_note(self, spec: dict) -> str:
        return f"{self.runtime.name} container of {spec.get('image')}"

    def _prepare(self, spec: dict) -> tuple[list[Mount], list[Mount]]:
        mounts = pod_mounts(spec, self.pod_root / str(spec["job_id"]), mounts_file=self.mounts_file)
        for mount in mounts:
            if not os.path.exists(mount.source):
                raise SourceError(DATA_SOURCE_FAILED if mount.read_only else "CodeSourceMountFailed",
                                  f"{mount.what}: {mount.source} does not exist on this node")
            if "," in mount.source or "," in mount.target:
                raise SourceError(DATA_SOURCE_FAILED if mount.read_only else "CodeSourceMountFailed",
                                  f"{mount.what}: a container runtime cannot bind-mount a path with a comma")
        self._pull(spec.get("image") or "", spec.get("image_config"))
        return mounts, []  # bind mounts leave nothing on the host to remove

    def _pull(self, image: str, image_config: dict | None) -> None:
        if problem := images.reference_problem(image):
            raise SourceError(IMAGE_PULL_FAILED, f"image {problem}")
        if self._cli(["image", "inspect", image]).returncode == 0:
            return
        with tempfile.TemporaryDirectory(prefix="opendlc-auth-") as private:
            auth = images.auth_file(Path(private), image, image_config)
            try:
                done = subprocess.run(self.runtime.pull_args(image, auth), capture_output=True, text=True,
                                      timeout=self.pull_timeout_s, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise SourceError(IMAGE_PULL_FAILED, f"pulling {image} took longer than {self.pull_timeout_s:g} s") \
                    from None
        if done.returncode != 0:
            raise SourceError(IMAGE_PULL_FAILED, f"cannot pull {image}: {_last_line(done)}")
        log.info("pulled %s", image)

    # -- start, stop, judge -------------------------------------------------------------------

    def _spawn(self, spec: dict, mounts: list[Mount]) -> PodProcess:
        workdir = self.pod_root / str(spec["job_id"]) / spec["pod_id"]
        workdir.mkdir(parents=True, exist_ok=True)
        ckpt_dir = str((spec.get("env") or {}).get("OPENDLC_CKPT_DIR")
                       or self.pod_root / str(spec["job_id"]) / "checkpoints")
        os.makedirs(ckpt_dir, exist_ok=True)
        name = container_name(spec["pod_id"], self.marker)
        env = container_env(spec)
        # An env file holds one line per variable: a value with a newline goes through the client's
        # own environment instead (`--env NAME`), still never on a command line.
        multiline = {k: v for k, v in env.items() if "\n" in v or "\r" in v}
        env_file = workdir / ENV_FILE
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in env.items() if k not in multiline)
        try:
            args = create_args(self.runtime, spec, name=name, marker=self.marker, env_file=env_file,
                               env_names=sorted(multiline), mounts=mounts, ckpt_dir=ckpt_dir)
            done = self._cli(args[1:], env={**os.environ, **multiline})
        finally:
            env_file.unlink(missing_ok=True)
        if done.returncode != 0:
            raise OSError(f"{self.runtime.name} create: {_last_line(done)}")
        with open(workdir / "pod.log", "ab") as out:
            # In the pod's directory: conmon, which `start` spawns, may leave files in its working directory.
            proc = subprocess.Popen([self.runtime.binary, "start", "--attach", name], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)
        resources = spec.get("resources") or {}
        log.info("pod %s started as container %s of %s", spec["pod_id"], name, spec["image"])
        return PodProcess(spec["pod_id"], str(spec["job_id"]), proc.pid, workdir, dict(spec.get("env") or {}), proc,
                          container=name, memory_mib=int(resources.get("mem_mib") or 0))

    def _terminate(self, pod: PodProcess, grace_s: float) -> None:
        done = self._cli(["stop", "--time", str(math.ceil(grace_s)), pod.container], timeout=grace_s + CLI_TIMEOUT_S)
        log.info("pod %s container %s stopped (%s)", pod.pod_id, pod.container,
                 "ok" if done.returncode == 0 else _last_line(done))
        pod.group_gone.set()

    def _watch(self, pod: PodProcess) -> None:
        if pod.proc is not None:
            pod.proc.wait()
        else:  # adopted: the attached client of the agent before us may still write the log
            while procs.group_alive(pod.pgid):
                time.sleep(0.5)
        # The client ended but the container did not (the client was killed, not the pod): nobody
        # writes its log any more, so follow it from where the log file stops.
        while self._state(pod.container).get("Running"):
            since = datetime.fromtimestamp(_mtime(pod.log_path), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            with open(pod.log_path, "ab") as out:
                subprocess.run([self.runtime.binary, "logs", "--follow", "--since", since, pod.container],
                               stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        with self._lock:
            stopping = bool(pod.stop_reason)
        if stopping:
            pod.group_gone.wait()
        self._finish(pod)

    def _state(self, container: str) -> dict:
        """The runtime's State of a container ({} when it is gone), with its Id."""
        done = self._cli(["inspect", "--format", "{{json .State}}\t{{.Id}}", container])
        if done.returncode != 0:
            return {}
        state_json, _, container_id = done.stdout.strip().partition("\t")
        return {**json.loads(state_json), "Id": container_id}

    def _outcome(self, pod: PodProcess) -> tuple[int | None, tuple[str, str] | None]:
        state = self._state(pod.container)
        if not state:  # removed behind our back: the client's exit code is the container's
            return self._exit_code(pod), None
        code = state.get("ExitCode")
        if not _ever_started(state):  # the runtime could not start it: its client said why, in the log
            return None, (START_FAILED, f"{self.runtime.name} could not start the container: {_log_tail(pod.log_path)}")
        oom = bool(state.get("OOMKilled"))
        if not oom and code == 137 and not pod.stop_reason:  # a SIGKILL nobody here sent
            oom = kernel_oom_killed(state["Id"], self.kmsg)
        if oom:
            limit = f" (memory limit {pod.memory_mib} MiB)" if pod.memory_mib else ""
            return code, (OOM_KILLED, f"out of memory{limit}: the kernel killed it; exit code {code}")
        return code, None

    def _cleanup(self, pod: PodProcess) -> None:
        self._main_pids.pop(pod.pod_id, None)
        done = self._cli(["rm", "--force", pod.container])
        if done.returncode != 0:
            log.warning("container %s not removed: %s", pod.container, _last_line(done))

    def metric_targets(self) -> list[Target]:
        """The containers' main processes: runc makes each the leader of the container's process group."""
        with self._lock:
            pods = [p for p in self.pods.values() if not p.stop_reason]
        targets = []
        for pod in pods:
            pid = self._main_pids.get(pod.pod_id)
            if pid is None:
                done = self._cli(["inspect", "--format", "{{.State.Pid}}", pod.container])
                pid = int(done.stdout.strip() or 0) if done.returncode == 0 else 0
                if pid:
                    self._main_pids[pod.pod_id] = pid
            if pid:
                targets.append(Target(pod.pod_id, pid, gpu_indices(pod.env)))
        return targets

    # -- reconcile ------------------------------------------------------------------------------

    def _containers(self) -> dict[str, str]:
        """This agent's containers: name -> state (running, exited, created, ...)."""
        done = self._cli(["ps", "--all", "--filter", f"label={LABEL_AGENT}={self.marker}",
                          "--format", "{{.Names}}\t{{.State}}"])
        if done.returncode != 0:
            raise RuntimeError(f"{self.runtime.name} ps: {_last_line(done)}")
        found = {}
        for line in done.stdout.splitlines():
            name, _, state = line.strip().partition("\t")
            if name:
                found[name] = state.strip().lower()
        return found

    def _census(self):
        """reconcile's questions, answered from one listing of this agent's containers."""
        containers = self._containers()

        def alive(pod: PodProcess) -> bool:
            # Docker says "running"; Podman 4 says "Up 3 minutes ago".
            return containers.pop(pod.container, "").startswith(("running", "up "))

        def remove_orphans(adopted: list[PodProcess]) -> None:
            for name in set(containers) - {p.container for p in adopted}:
                log.warning("removing container %s: no pod of this agent owns it", name)
                self._cli(["rm", "--force", name])

        return alive, remove_orphans

    def _runs_as(self, pod: PodProcess) -> str:
        return f"container {pod.container}"

    def _cli(self, args: list[str], *, env: dict | None = None, timeout: float = CLI_TIMEOUT_S
             ) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([self.runtime.binary, *args], capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, env=env)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, 124, "", f"{args[0]} took longer than {timeout:g} s")


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1].removeprefix("Error: ").strip() if lines else f"exit status {done.returncode}"


def _ever_started(state: dict) -> bool:
    # A container that never ran keeps the zero time ("0001-01-01T00:00:00Z") as its start.
    return not str(state.get("StartedAt") or "0001").startswith("0001")


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no message"
    return lines[-1].removeprefix("Error: ")[:500] if lines else "no message"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()
