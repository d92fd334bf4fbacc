"""What this machine offers: CPU count, memory, and GPUs discovered through NVML."""

import logging
import os
import socket
from dataclasses import asdict, dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_mib: int


@dataclass(frozen=True)
class Machine:
    hostname: str
    cpu: int
    memory_mib: int
    gpus: tuple[Gpu, ...]
    gpu_note: str  # why no GPUs were found, empty when NVML answered

    def as_payload(self) -> dict:
        return {
            "hostname": self.hostname, "cpu": self.cpu, "memory_mib": self.memory_mib,
            "gpus": [asdict(g) for g in self.gpus],
        }


def discover_gpus() -> tuple[list[Gpu], str]:
    """The GPUs NVML sees, or ([], why not) when the library, the driver or the devices are missing."""
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], f"NVML is not available: {exc}"
    try:
        return [_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())], ""
    except pynvml.NVMLError as exc:
        return [], f"NVML could not list the GPUs: {exc}"
    finally:
        pynvml.nvmlShutdown()


def _gpu(pynvml, index: int) -> Gpu:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return Gpu(
        index=index,
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        memory_mib=pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024),
    )


def _text(value) -> str:
    # Older NVML bindings return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else str(value)


def memory_mib() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may use, e.g. inside a container
    except AttributeError:
        return os.cpu_count() or 1


def discover() -> Machine:
    gpus, note = discover_gpus()
    if note:
        log.info("no GPUs: %s", note)
    else:
        log.info("NVML found %d GPU(s): %s", len(gpus), ", ".join(f"{g.index}:{g.name}" for g in gpus))
    return Machine(socket.gethostname(), cpu_count(), memory_mib(), tuple(gpus), note)
