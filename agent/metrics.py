"""What each running pod uses, sampled by the agent: CPU and resident memory of its process group
from /proc, and utilization and memory of its GPUs through NVML when NVML is there.

A pod's process group holds every process it started (agent/procs.py), so its CPU time and RSS are
the sums over the group's live members. CPU is a rate: the CPU time used since the pod's previous
sample over the wall time between them, in millicores (1000 = one core busy). The GPUs are the
pod's own (CUDA_VISIBLE_DEVICES, NVML indices): a pod holds its GPUs alone, so a device's
utilization and used memory are the pod's.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from agent.outbox import utcnow_iso
from agent.procs import PROC, group_members

log = logging.getLogger(__name__)

METRICS_TASK = "jobs.pod_metrics"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


@dataclass(frozen=True)
class Target:
    """A running pod to sample: its id, process group and GPU indices."""

    pod_id: str
    pgid: int
    gpus: tuple[int, ...]


def group_usage(pgid: int) -> tuple[float, int]:
    """(CPU seconds used so far, resident MiB now) summed over the group's live processes."""
    cpu_s, rss_pages = 0.0, 0
    for pid in group_members(pgid):
        try:
            stat = (PROC / str(pid) / "stat").read_text()
            statm = (PROC / str(pid) / "statm").read_text().split()
        except OSError:
            continue  # ended between the listing and the read
        fields = stat[stat.rindex(")") + 2:].split()
        # utime and stime, fields 14 and 15 of stat (after the command name: 12 and 13, from 1).
        cpu_s += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        rss_pages += int(statm[1])
    return cpu_s, int(rss_pages * PAGE_MIB)


class GpuReader:
    """NVML's utilization and used memory per GPU index; reads nothing when NVML is missing."""

    def __init__(self):
        self.nvml = None
        try:
            import pynvml
        except ImportError:
            log.info("pod GPU metrics off: nvidia-ml-py is not installed")
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # the driver or the devices are missing
            log.info("pod GPU metrics off: NVML is not available: %s", exc)
            return
        self.nvml = pynvml

    def read(self, indices: tuple[int, ...]) -> tuple[int, int] | None:
        """(mean utilization percent, used MiB summed) of the GPUs, or None without NVML or GPUs."""
        if self.nvml is None or not indices:
            return None
        try:
            handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
            util = [self.nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
            used = [self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]
        except self.nvml.NVMLError as exc:
            log.warning("NVML could not read GPUs %s: %s", indices, exc)
            return None
        return round(sum(util) / len(util)), sum(used) // (1024 * 1024)

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.nvmlShutdown()
            self.nvml = None


class PodSampler:
    """Samples pods; remembers each pod's last CPU time, since CPU use is a rate between samples."""

    def __init__(self, gpus: GpuReader | None = None, clock=time.monotonic):
        self.gpus = gpus or GpuReader()
        self.clock = clock
        self._last: dict[str, tuple[float, float]] = {}  # pod id -> (monotonic time, CPU seconds)

    def sample(self, targets: list[Target]) -> list[dict]:
        now, samples = self.clock(), []
        for target in targets:
            cpu_s, rss_mib = group_usage(target.pgid)
            before = self._last.get(target.pod_id)
            self._last[target.pod_id] = (now, cpu_s)
            if before is None or now <= before[0]:
                continue  # the first sample of a pod only starts its CPU clock
            gpu = self.gpus.read(target.gpus)
            samples.append({
                "pod_id": target.pod_id, "at": utcnow_iso(),
                "cpu_m": max(0, round((cpu_s - before[1]) / (now - before[0]) * 1000)), "mem_mib": rss_mib,
                "gpu_util": gpu[0] if gpu else None, "gpu_mem_mib": gpu[1] if gpu else None,
            })
        for gone in set(self._last) - {t.pod_id for t in targets}:
            del self._last[gone]
        return samples


def gpu_indices(env: dict) -> tuple[int, ...]:
    """The pod's GPUs, as the platform gave them in CUDA_VISIBLE_DEVICES."""
    value = env.get("CUDA_VISIBLE_DEVICES", "")
    return tuple(int(i) for i in value.split(",") if i.strip().isdigit())
