"""The process executor: each pod is `bash -c <command>` in its own process group on this machine.

A pod lives in <pod root>/<job_id>/<pod_id>/ (its working directory, `pod.log` with stdout and
stderr, and the exit code its wrapper writes). One watcher thread per pod waits for it; one shipper
thread sends new log bytes and changed progress files to the platform. The pods this agent runs are
listed in a small state file, so a restarted agent adopts the ones still alive, reports the ones
that ended while it was away, and kills pod processes that nobody owns any more.

Before the command runs, the pod's code source is cloned (once per job on this node, into
<pod root>/<job_id>/code) and each dataset and the clone appear at their mount paths as symbolic
links (agent/mounts.py): this runtime runs pods on the host, so it cannot bind-mount. A link is
removed when the last pod that uses it ends. A source that cannot be mounted or cloned fails the
pod at once with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from agent import procs
from agent.mounts import MOUNTS_FILE, Mount, MountError, link, unlink
from agent.sources import DATA_SOURCE_FAILED, SourceError, pod_mounts
from agent.logship import LogShipper
from agent.metrics import Target, gpu_indices
from agent.outbox import Outbox

log = logging.getLogger(__name__)

# Every pod process carries OPENDLC_AGENT=<node>@<pod root>: a restarted agent finds its orphans by
# it, and never touches the pods of another install on the same machine.
MARKER = "OPENDLC_AGENT"
EXIT_CODE_FILE = ".opendlc-exit-code"
# The outer shell records the command's exit code, so an agent that restarted while the pod ran
# still learns how it ended. An untrapped SIGTERM kills the outer shell at once; the command's own
# traps still run, and the pod counts as ended only when the whole group is gone.
WRAPPER = 'bash -c "$1"; rc=$?; printf %s "$rc" > ' + EXIT_CODE_FILE + '; exit "$rc"'
# Variables of the agent's own environment a pod inherits unless the platform sets them.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH")


def marker(node: str, pod_root: Path) -> str:
    return f"{node}@{Path(pod_root).resolve()}"


@dataclass(frozen=True)
class PodUser:
    """The unprivileged user the process runtime runs pods as: not the agent's, so that a pod can
    read neither the agent's environment (/proc/<agent>/environ) nor its files."""

    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> PodUser:
        """The user of that name or number; ValueError saying so when this host has none."""
        try:
            entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        except (KeyError, ValueError):
            raise ValueError(f"no user {name!r} on this host") from None
        if entry.pw_uid == 0:
            raise ValueError("pods must not run as root: name an unprivileged user")
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)

    def can_reach(self, path: Path) -> str | None:
        """The first directory on the way to `path` this user cannot enter, or None."""
        for directory in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
            try:
                st = directory.stat()
            except FileNotFoundError:
                return None  # made by the agent, traversable (0755)
            bit = stat.S_IXUSR if st.st_uid == self.uid else stat.S_IXGRP if st.st_gid == self.gid else stat.S_IXOTH
            if not st.st_mode & bit:
                return str(directory)
        return None


@dataclass
class PodProcess:
    pod_id: str
    job_id: str
    pgid: int
    workdir: Path
    env: dict
    proc: subprocess.Popen | None = None  # None when adopted from an earlier agent
    stop_reason: str = ""
    group_gone: threading.Event = field(default_factory=threading.Event)
    mounts: list[Mount] = field(default_factory=list)
    links: list[Mount] = field(default_factory=list)  # the mounts whose link this agent made
    container: str = ""  # the container runtime's name for the pod; "" for a process
    memory_mib: int = 0  # its memory limit, for the message of an out-of-memory kill

    @property
    def log_path(self) -> Path:
        return self.workdir / "pod.log"

    def state(self) -> dict:
        return {"job_id": self.job_id, "pgid": self.pgid, "workdir": str(self.workdir), "env": self.env,
                "mounts": [m.as_dict() for m in self.mounts], "links": [m.as_dict() for m in self.links],
                "container": self.container, "memory_mib": self.memory_mib}

    @classmethod
    def from_state(cls, pod_id: str, st: dict) -> PodProcess:
        return cls(pod_id, st["job_id"], st["pgid"], Path(st["workdir"]), st.get("env", {}),
                   mounts=[Mount(**m) for m in st.get("mounts", [])], links=[Mount(**m) for m in st.get("links", [])],
                   container=st.get("container", ""), memory_mib=st.get("memory_mib", 0))


class ProcessExecutor:
    """Pods as process groups on the host. The container executor (agent/container.py) is this
    life with another way to prepare, start, stop and judge a pod: the hooks below marked "runtime"."""

    kind = "process"

    def __init__(self, node: str, pod_root: Path, outbox: Outbox, *, ship_interval_s: float = 1.0,
                 pod_user: PodUser | None = None):
        self.node = node
        self.pod_root = Path(pod_root)
        self.pod_user = pod_user  # None: pods run as the agent's own user
        self.outbox = outbox
        self.pods: dict[str, PodProcess] = {}
        self._ended: deque[str] = deque(maxlen=10_000)  # recent pods, so a redelivered start is ignored
        self._lock = threading.RLock()
        self._preparing: dict[str, list[Mount]] = {}  # pods whose sources are being mounted
        self.mounts_file = MOUNTS_FILE
        self.state_path = self.pod_root / ".agents" / f"{node}.json"
        self.marker = marker(node, self.pod_root)
        self.shipper = LogShipper(outbox, self._snapshot, interval_s=ship_interval_s)

    # -- the two messages of the contract -------------------------------------------------------

    def start(self, spec: dict) -> None:
        pod_id = spec["pod_id"]
        with self._lock:
            if pod_id in self.pods or pod_id in self._ended or pod_id in self._preparing:
                log.info("pod %s is already known; start ignored", pod_id)
                return
            self._preparing[pod_id] = []
        # Outside the lock: a clone may take a while, and stops of other pods must not wait for it.
        try:
            mounts, links = self._prepare(spec)
        except SourceError as exc:
            with self._lock:
                self._preparing.pop(pod_id, None)
                if pod_id not in self._ended:
                    self._ended.append(pod_id)
                    self.outbox.report(pod_id, "Failed", reason=exc.reason, message=exc.message, urgent=True)
            return
        with self._lock:
            self._preparing.pop(pod_id, None)
            if pod_id in self._ended:  # stopped while its sources were being prepared
                self._release(links)
                return
            try:
                pod = self._spawn(spec, mounts)
            except OSError as exc:
                self._ended.append(pod_id)
                self._release(links)
                self.outbox.report(pod_id, "Failed", reason="StartError", message=f"could not start: {exc}")
                return
            pod.mounts, pod.links = mounts, links
            self.pods[pod_id] = pod
            self._save_state()
        self.outbox.report(pod_id, "Running", message=self._running_note(spec))
        threading.Thread(target=self._watch, args=(pod,), name=f"pod-{pod_id}", daemon=True).start()
        if spec.get("max_running_time_s"):
            timer = threading.Timer(
                spec["max_running_time_s"], self.stop, args=(pod_id, "MaxRunningTime", spec.get("grace_s", 30))
            )
            timer.daemon = True
            timer.start()

    def resize(self, update: dict) -> None:
        """An in-place resize (jobs/elastic.py): write the pod's new membership to the file its
        environment names, where easyckpt.ElasticGroup polls it. Replaced whole, so that a reader
        never sees half of it."""
        with self._lock:
            pod = self.pods.get(update["pod_id"])
        path = pod.env.get("OPENDLC_MEMBERSHIP_FILE") if pod is not None and not pod.stop_reason else None
        if not path:
            log.warning("resize of pod %s ignored: %s", update["pod_id"],
                        "it does not run here" if path is None else "it has no membership file")
            return
        membership = {k: update[k] for k in ("generation", "rank", "world_size", "master_addr", "master_port")}
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_text(json.dumps(membership))
        os.replace(partial, target)
        log.info("pod %s resized in place: rank %s of %s (generation %s)", update["pod_id"], membership["rank"],
                 membership["world_size"], membership["generation"])

    def stop(self, pod_id: str, reason: str, grace_s: float) -> None:
        with self._lock:
            pod = self.pods.get(pod_id)
            if pod is None:
                if pod_id not in self._ended:
                    # Stopped before it started here: make sure a late start is ignored.
                    self._ended.append(pod_id)
                    self.outbox.report(pod_id, "Failed", reason=reason, message="stopped before it started",
                                       urgent=True)
                return
            if pod.stop_reason:
                return
            pod.stop_reason = reason
        log.info("stopping pod %s (%s), grace %ss", pod_id, reason, grace_s)
        threading.Thread(target=self._terminate, args=(pod, grace_s), daemon=True).start()

    def running_pod_ids(self) -> list[str]:
        with self._lock:
            return sorted([*self.pods, *self._preparing])

    # -- data and code sources ------------------------------------------------------------------

    def _running_note(self, spec: dict) -> str:
        """Runtime: what the pod's Running report adds to its "Started" event."""
        # This runtime runs the command on the host: say so, since the job named an image it did not get.
        return "image not used: process runtime" if spec.get("image") else ""

    def _prepare(self, spec: dict) -> tuple[list[Mount], list[Mount]]:
        """Runtime: the pod's mounts (code cloned), each linked at its mount path; (mounts, links made).
        On failure the links made so far are removed again."""
        mounts = pod_mounts(spec, self.pod_root / str(spec["job_id"]), mounts_file=self.mounts_file)
        with self._lock:
            self._preparing[spec["pod_id"]] = mounts  # so that a pod ending now leaves these links
        links = []
        for mount in mounts:
            try:
                if link(mount):
                    links.append(mount)
            except MountError as exc:
                with self._lock:
                    self._preparing[spec["pod_id"]] = []
                    self._release(links)
                raise SourceError(DATA_SOURCE_FAILED if mount.read_only else "CodeSourceMountFailed", str(exc)) \
                    from None
        return mounts, links

    def _release(self, links: list[Mount]) -> None:
        """Remove the links a pod made, unless another live pod uses the same one: it takes it over.
        Call holding the lock."""
        for mount in links:
            heir = next((p for p in self.pods.values() if any(m.target == mount.target for m in p.mounts)), None)
            if heir is not None:
                heir.links.append(mount)
            elif not any(m.target == mount.target for ms in self._preparing.values() for m in ms):
                unlink(mount)

    def metric_targets(self) -> list[Target]:
        """The running pods to sample (agent/metrics.py): not those being stopped."""
        with self._lock:
            return [Target(p.pod_id, p.pgid, gpu_indices(p.env)) for p in self.pods.values() if not p.stop_reason]

    # -- running a pod ------------------------------------------------------------------------

    def _spawn(self, spec: dict, mounts: list[Mount]) -> PodProcess:
        """Runtime: start the pod's command, its mounts in place; OSError when it cannot."""
        workdir = self.pod_root / str(spec["job_id"]) / spec["pod_id"]
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / EXIT_CODE_FILE).unlink(missing_ok=True)
        env = self._environment(spec)
        user = self.pod_user
        if user is not None:
            if "HOME" not in (spec.get("env") or {}):
                env["HOME"] = str(workdir)  # the agent's home is not the pod's
            ckpt = Path(env["OPENDLC_CKPT_DIR"])
            ckpt.mkdir(parents=True, exist_ok=True)
            for path in (workdir, ckpt):
                os.chown(path, user.uid, user.gid)
                path.chmod(0o700)
        with open(workdir / "pod.log", "ab") as out:
            proc = subprocess.Popen(
                ["bash", "-c", WRAPPER, "opendlc-pod", spec["command"]],
                cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop signals reach every child
                **({"user": user.uid, "group": user.gid, "extra_groups": []} if user else {}),
            )
        log.info("pod %s started as process group %s in %s", spec["pod_id"], proc.pid, workdir)
        return PodProcess(spec["pod_id"], str(spec["job_id"]), proc.pid, workdir, env, proc)

    def _environment(self, spec: dict) -> dict:
        env = {k: os.environ[k] for k in INHERITED if k in os.environ}
        env.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
        env.setdefault("OPENDLC_CKPT_DIR", str(self.pod_root / str(spec["job_id"]) / "checkpoints"))
        env.update(OPENDLC_POD_ID=spec["pod_id"], OPENDLC_JOB_ID=str(spec["job_id"]))
        env[MARKER] = self.marker
        return env

    def _terminate(self, pod: PodProcess, grace_s: float) -> None:
        """Runtime: SIGTERM, the grace period, SIGKILL; then mark the pod's processes gone."""
        how = procs.terminate_group(pod.pgid, grace_s)
        log.info("pod %s process group %s %s", pod.pod_id, pod.pgid, how)
        pod.group_gone.set()

    def _watch(self, pod: PodProcess) -> None:
        """Runtime: wait for the pod to end, then finish it."""
        if pod.proc is not None:
            pod.proc.wait()
        else:
            while procs.group_alive(pod.pgid):  # adopted: not our child, so poll
                time.sleep(0.5)
        with self._lock:
            stopping = bool(pod.stop_reason)
        if stopping:
            pod.group_gone.wait()
        else:
            # The command ended; children it left behind must not keep holding the GPUs.
            procs.signal_group(pod.pgid, signal.SIGKILL)
            procs.wait_gone(pod.pgid, 30)
        self._finish(pod)

    def _finish(self, pod: PodProcess) -> None:
        code, failure = self._outcome(pod)
        self.shipper.ship(pod, final=True)
        self._cleanup(pod)
        with self._lock:
            self.pods.pop(pod.pod_id, None)
            self._ended.append(pod.pod_id)
            self._release(pod.links)
            self._save_state()
        if pod.stop_reason:
            self.outbox.report(pod.pod_id, "Failed", exit_code=code, reason=pod.stop_reason,
                               message=f"stopped ({pod.stop_reason}); exit code {code}", urgent=True)
        elif failure is not None:
            self.outbox.report(pod.pod_id, "Failed", exit_code=code, reason=failure[0], message=failure[1])
        elif code == 0:
            self.outbox.report(pod.pod_id, "Succeeded", exit_code=0)
        else:
            self.outbox.report(pod.pod_id, "Failed", exit_code=code, reason="Error",
                               message=f"the command exited with code {code}")
        log.info("pod %s ended: exit code %s %s", pod.pod_id, code, pod.stop_reason)

    def _outcome(self, pod: PodProcess) -> tuple[int | None, tuple[str, str] | None]:
        """Runtime: the exit code of an ended pod, and (reason, message) when it failed for another
        cause than its command's exit code (it never started, or the kernel killed it for memory)."""
        # A process pod has no memory limit of its own: the host's OOM killer is not the pod's doing.
        return self._exit_code(pod), None

    def _cleanup(self, pod: PodProcess) -> None:
        """Runtime: what an ended pod leaves behind, once its last log is shipped."""

    @staticmethod
    def _exit_code(pod: PodProcess) -> int | None:
        try:
            return int((pod.workdir / EXIT_CODE_FILE).read_text())
        except (OSError, ValueError):
            pass
        if pod.proc is None or pod.proc.returncode is None:
            return None
        rc = pod.proc.returncode
        return 128 - rc if rc < 0 else rc  # killed by signal N: 128+N, as a shell reports it

    def _snapshot(self) -> list[PodProcess]:
        with self._lock:
            return list(self.pods.values())

    # -- state and reconcile --------------------------------------------------------------------

    def _save_state(self) -> None:
        # The state holds every pod's environment: only the agent may read it.
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        self.state_path.parent.chmod(0o700)
        # A temporary file of its own: a second writer of the same state file (an agent restarted
        # while the old one still finishes a pod) must not rename ours away from under us.
        fd, tmp = tempfile.mkstemp(dir=self.state_path.parent, prefix=self.state_path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({pid: p.state() for pid, p in self.pods.items()}))
        os.replace(tmp, self.state_path)

    def _load_state(self) -> dict:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}

    def reconcile(self) -> None:
        """At start: adopt our pods still alive, report those that ended, remove what no pod owns."""
        alive, remove_orphans = self._census()
        adopted = []
        for pod_id, st in self._load_state().items():
            pod = PodProcess.from_state(pod_id, st)
            if alive(pod):
                adopted.append(pod)
            else:
                log.info("pod %s ended while the agent was away", pod_id)
                self._finish(pod)
        with self._lock:
            for pod in adopted:
                self.pods[pod.pod_id] = pod
            self._save_state()
        for pod in adopted:
            log.info("adopted running pod %s (%s)", pod.pod_id, self._runs_as(pod))
            threading.Thread(target=self._watch, args=(pod,), name=f"pod-{pod.pod_id}", daemon=True).start()
        remove_orphans(adopted)

    def _census(self):
        """What reconcile asks of the runtime: whether a pod of the state file still runs, and how
        to remove what runs for this agent that no adopted pod owns."""

        def remove_orphans(adopted: list[PodProcess]) -> None:
            for pgid in procs.groups_with_env(MARKER, self.marker) - {p.pgid for p in adopted}:
                log.warning("killing orphaned pod process group %s", pgid)
                procs.signal_group(pgid, signal.SIGKILL)

        return (lambda pod: procs.group_alive(pod.pgid)), remove_orphans

    def _runs_as(self, pod: PodProcess) -> str:
        return f"process group {pod.pgid}"

    def run(self) -> None:
        self.reconcile()
        self.shipper.start()

    def close(self) -> None:
        self.shipper.stop()
