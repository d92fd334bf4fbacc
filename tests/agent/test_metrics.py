"""The agent samples what each running pod uses: CPU and memory from /proc over the pod's process
group (a real process here), and its GPUs through NVML (mocked: no GPU on this machine)."""

import time

import pynvml

from agent import metrics
from agent.metrics import GpuReader, PodSampler, Target
from agent.runtime import Agent
from tests.agent.helpers import wait_for

BUSY = "python3 -c 'import time\nx = bytearray(64 * 1024 * 1024)\nend = time.time() + 30\nwhile time.time() < end: pass'"


class NoGpus(GpuReader):
    def __init__(self):
        self.nvml = None



def start(executor, pod_id, command, gpus=""):
    executor.start({"pod_id": pod_id, "job_id": "job-1", "node": "metrics-node", "role": "Worker", "index": 0,
                    "incarnation": 0, "command": command, "env": {"CUDA_VISIBLE_DEVICES": gpus}, "grace_s": 1,
                    "executor": "process", "max_running_time_s": None})


def test_a_busy_pod_uses_about_a_core_and_its_memory(executor):
    start(executor, "p-busy", BUSY)
    sampler = PodSampler(NoGpus())
    wait_for(lambda: metrics.group_usage(executor.metric_targets()[0].pgid)[1] >= 64, timeout=10)
    assert sampler.sample(executor.metric_targets()) == []  # the first sample starts the pod's CPU clock
    time.sleep(0.5)
    [sample] = sampler.sample(executor.metric_targets())
    assert sample["pod_id"] == "p-busy"
    assert 500 <= sample["cpu_m"] <= 1100  # one busy loop: about one core
    assert 64 <= sample["mem_mib"] < 512
    assert sample["gpu_util"] is None and sample["gpu_mem_mib"] is None


def test_an_idle_pod_uses_almost_no_cpu(executor):
    start(executor, "p-idle", "sleep 30")
    sampler = PodSampler(NoGpus())
    wait_for(lambda: executor.metric_targets(), timeout=5)
    sampler.sample(executor.metric_targets())
    time.sleep(0.3)
    [sample] = sampler.sample(executor.metric_targets())
    assert sample["cpu_m"] < 100


def test_a_pod_being_stopped_is_not_sampled(executor):
    start(executor, "p-stop", "trap '' TERM; sleep 30")
    wait_for(lambda: executor.metric_targets(), timeout=5)
    executor.stop("p-stop", "Stopped", 5)
    assert executor.metric_targets() == []


def test_the_pods_gpus_are_read_through_nvml(monkeypatch):
    class Util:
        def __init__(self, gpu):
            self.gpu = gpu

    class Memory:
        def __init__(self, used):
            self.used = used

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", lambda h: Util({2: 90, 3: 70}[h]))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: Memory({2: 10, 3: 6}[h] * 1024**3))
    reader = GpuReader()
    assert reader.read((2, 3)) == (80, 16 * 1024)
    assert reader.read(()) is None  # a CPU pod has no GPU figures


def test_without_nvml_the_gpu_figures_are_absent_not_zero(monkeypatch):
    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert GpuReader().read((0,)) is None


def test_the_pods_gpus_are_those_of_cuda_visible_devices():
    assert metrics.gpu_indices({"CUDA_VISIBLE_DEVICES": "2,3"}) == (2, 3)
    assert metrics.gpu_indices({"CUDA_VISIBLE_DEVICES": ""}) == ()


def test_the_agent_sends_its_samples_with_each_heartbeat(executor, recorder):
    start(executor, "p-beat", "sleep 30", gpus="0")
    wait_for(lambda: executor.metric_targets(), timeout=5)
    assert executor.metric_targets() == [Target("p-beat", executor.metric_targets()[0].pgid, (0,))]
    agent = Agent("metrics-node", executor, executor.outbox, None, send_heartbeat=lambda beat: None,
                  heartbeat_s=60, token="t", replay_window_s=600, sampler=PodSampler(NoGpus()))
    agent.beat_once()
    agent.beat_once()
    sent = wait_for(lambda: recorder.items(metrics.METRICS_TASK), timeout=5)
    assert sent[0]["pod_id"] == "p-beat" and sent[0]["mem_mib"] >= 0
