"""What an agent discovers about its machine."""

import pynvml
import pytest

from agent import machine


def test_without_an_nvidia_driver_gpu_discovery_returns_no_gpus_and_says_why(monkeypatch):
    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    gpus, why = machine.discover_gpus()
    assert gpus == []
    assert why.startswith("NVML is not available: ") and "Driver Not Loaded" in why


def test_on_this_machine_gpu_discovery_either_finds_gpus_or_says_why_not():
    gpus, why = machine.discover_gpus()
    assert bool(gpus) != bool(why)


def test_gpu_discovery_reads_index_uuid_name_and_memory_from_nvml(monkeypatch):
    class Memory:
        total = 80 * 1024**3

    calls = {"shutdown": 0}
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.__setitem__("shutdown", 1))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: f"GPU-{h}")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: b"NVIDIA H100")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: Memory())
    gpus, why = machine.discover_gpus()
    assert why == "" and calls["shutdown"] == 1
    assert gpus == [machine.Gpu(0, "GPU-0", "NVIDIA H100", 81920), machine.Gpu(1, "GPU-1", "NVIDIA H100", 81920)]


@pytest.mark.parametrize("field", ["cpu", "memory_mib"])
def test_the_machine_reports_positive_cpu_and_memory(field):
    assert getattr(machine.discover(), field) > 0
