"""Runs every GPU path of OpenDLC here and prints what it saw: a PASS, FAIL or SKIPPED line a check.

    python3 bench/device_check.py               # on a GPU machine; exits 0 only if nothing failed
    python3 bench/device_check.py --device cpu  # the EasyCkpt checks on the CPU, to try this script

The paths: NVML discovery as the agent registers its node (agent/machine.py); the GPUs a pod sees
when the real process executor (agent/process.py) starts it with the CUDA_VISIBLE_DEVICES that
jobs/dispatch.py pod_env() gives it; EasyCkpt with CUDA tensors (tests/easyckpt, a model and its
optimizer saved and loaded back in each snapshot mode, save()'s stall against torch.save for
1 GiB). It needs no Django, so it runs on a bare GPU machine; without a GPU those checks SKIP.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.machine import discover  # noqa: E402
from agent.metrics import PodSampler  # noqa: E402
from agent.outbox import Outbox  # noqa: E402
from agent.process import ProcessExecutor  # noqa: E402
from tests.agent.helpers import Recorder, wait_for  # noqa: E402

results: list[str] = []

# What a pod prints: the GPUs torch sees through the CUDA_VISIBLE_DEVICES the executor gave it.
PROBE = """
import torch
n = torch.cuda.device_count()
p = torch.cuda.get_device_properties(0) if n else None
print("pod sees", n, "GPU(s):", p.name if p else "-", "uuid", getattr(p, "uuid", "-") if p else "-")
"""


def report(status: str, name: str, detail: str = "") -> None:
    results.append(status)
    print(f"{status}: {name}" + (f" -- {detail}" if detail else ""), flush=True)


def check(name: str, passed: bool, detail: str = "") -> None:
    report("PASS" if passed else "FAIL", name, detail)


def section(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def guarded(name: str, fn, *args):
    """Run one check; an exception is that check's FAIL, not the end of the others."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - whatever broke, the report must go on
        traceback.print_exc()
        check(name, False, "raised (traceback above)")
        return None


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- the machine ---------------------------------------------------------------------------------


def nvidia_smi() -> list[list[str]]:
    """The GPUs nvidia-smi lists: [index, name, memory MiB, driver, uuid] each."""
    section("nvidia-smi")
    if shutil.which("nvidia-smi") is None:
        report("SKIPPED", "nvidia-smi", "not on the PATH")
        return []
    query = "--query-gpu=index,name,memory.total,driver_version,uuid"
    out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"],
                         check=False, capture_output=True, text=True, timeout=60)
    print(out.stdout + out.stderr, end="")
    rows = [[f.strip() for f in line.split(",")] for line in out.stdout.splitlines() if line]
    check("nvidia-smi lists the GPUs", out.returncode == 0 and bool(rows), f"{len(rows)} GPU(s)")
    return rows


def nvml_discovery(smi: list[list[str]], torch) -> list:
    section("agent.machine.discover() (NVML)")
    machine = discover()
    print(json.dumps(machine.as_payload(), indent=1))
    gpus = machine.gpus
    # Named as jobs/nodes.py spec_for_machine() names the instance type of a node that registers.
    print(f"registers as instance type local.c{machine.cpu}m{machine.memory_mib // 1024}"
          f"g{len(gpus)}, gpu_type {gpus[0].name if gpus else '-'!r}")
    if not gpus:
        if smi or (torch and torch.cuda.is_available()):
            check("NVML finds the GPUs", False, f"none, though the machine has: {machine.gpu_note}")
        else:
            report("SKIPPED", "NVML finds the GPUs", f"no GPU here: {machine.gpu_note}")
        return []
    seen = [(g.index, g.name, g.uuid, g.memory_mib) for g in gpus]
    listed = [(int(r[0]), r[1], r[4], int(r[2])) for r in smi]
    check("NVML's GPUs are nvidia-smi's (index, name, uuid, MiB)", seen == listed, f"{seen}")
    if torch is not None:
        check("NVML counts the GPUs torch counts", len(gpus) == torch.cuda.device_count(),
              f"NVML {len(gpus)}, torch {torch.cuda.device_count()}")
    return list(gpus)


# -- the GPUs a pod sees -------------------------------------------------------------------------


def pod_gpus(gpus: list, work: Path) -> None:
    section("pods through agent.process.ProcessExecutor")
    recorder = Recorder()
    outbox = Outbox(recorder, flush_s=0.02)
    executor = ProcessExecutor("device-check", work / "pods", outbox, ship_interval_s=0.1)
    executor.run()
    try:
        # GPU 0; the last one too when there are several (CUDA's numbering must be NVML's); none.
        assignments = [[0]] + ([[len(gpus) - 1]] if len(gpus) > 1 else []) + [[]]
        for indices in assignments:
            run_pod(executor, recorder, indices, gpus)
        if gpus:
            pod_metrics(executor, recorder)
    finally:
        executor.close()
        outbox.close()


def run_pod(executor: ProcessExecutor, recorder: Recorder, indices: list[int], gpus: list) -> None:
    pod_id = "gpus-" + ("-".join(map(str, indices)) or "none")
    visible = ",".join(map(str, indices))
    # The variables jobs/dispatch.py pod_env() sets for the GPUs (a single pod: rank 0 of 1).
    env = {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
           "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"}
    command = (f'echo "CUDA_VISIBLE_DEVICES=[$CUDA_VISIBLE_DEVICES]"; '
               f"{shlex.quote(sys.executable)} -c {shlex.quote(PROBE)}")
    executor.start({"pod_id": pod_id, "job_id": "device-check", "node": "device-check",
                    "role": "Worker", "index": 0, "incarnation": 0, "command": command, "env": env,
                    "grace_s": 5, "executor": "process", "max_running_time_s": 120})
    outcome = wait_for(lambda: recorder.final_report(pod_id), timeout=150)
    text = recorder.log_text(pod_id)
    print(f"pod {pod_id}: {outcome['status']} exit {outcome['exit_code']} {outcome['reason']}")
    print(text, end="")
    name = f"a pod assigned GPUs [{visible}] sees exactly those"
    if indices and not gpus:
        report("SKIPPED", name, "no GPU here")
        return
    want = [g for g in gpus if g.index in indices]
    line = next((x for x in text.splitlines() if x.startswith("pod sees")), "")
    ok = outcome["status"] == "Succeeded" and line.startswith(f"pod sees {len(want)} GPU(s):")
    for g in want:  # torch may print the uuid without NVML's "GPU-" prefix
        ok = ok and g.name in line and g.uuid.removeprefix("GPU-") in line
    check(name, ok, line or "no 'pod sees' line in its log")


# A pod that keeps its GPU busy for a few seconds, for the agent's sampler to see.
BUSY = """
import time, torch
a = torch.randn(4096, 4096, device="cuda")
end = time.time() + 8
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()
"""


def pod_metrics(executor: ProcessExecutor, recorder: Recorder) -> None:
    """The agent's sampler (agent/metrics.py) on a pod busy on GPU 0: its CPU, memory and GPU."""
    env = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    executor.start({"pod_id": "metrics", "job_id": "device-check", "node": "device-check", "role": "Worker",
                    "index": 0, "incarnation": 0, "command": f"{shlex.quote(sys.executable)} -c {shlex.quote(BUSY)}",
                    "env": env, "grace_s": 5, "executor": "process", "max_running_time_s": 120})
    sampler, samples = PodSampler(), []
    deadline = time.time() + 60
    while time.time() < deadline and not recorder.final_report("metrics"):
        samples += sampler.sample(executor.metric_targets())
        time.sleep(1)
    busy = [s for s in samples if (s["gpu_util"] or 0) > 0]
    print("samples:", json.dumps(samples[-3:]))
    check("the agent samples a pod's CPU, memory and GPU through /proc and NVML",
          bool(busy) and all(s["cpu_m"] > 0 and s["mem_mib"] > 0 and s["gpu_mem_mib"] > 0 for s in busy),
          f"{len(samples)} samples, {len(busy)} with the GPU busy")


# -- EasyCkpt ------------------------------------------------------------------------------------


def easyckpt_tests(cuda: bool, work: Path) -> None:
    section("tests/easyckpt with pytest")
    # tests/conftest.py imports Django: our own ini, and conftest files from tests/easyckpt down.
    ini = work / "pytest.ini"
    ini.write_text("[pytest]\n")
    # One process, as CI runs them: once a CUDA test has started CUDA no writer is forked, and the
    # fork tests must skip rather than run their child's hooks in pytest itself.
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:django", "-c", str(ini),
           f"--rootdir={REPO}", "--confcutdir=tests/easyckpt", "-q", "-rs", "tests/easyckpt"]
    out = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=300)
    print(f"$ pytest tests/easyckpt\n{out.stdout}{out.stderr}", end="")
    summary = (out.stdout.strip().splitlines() or ["no output"])[-1]
    check("tests/easyckpt pass in one process", out.returncode == 0, f"exit status {out.returncode}: {summary}")
    skipped = out.stdout.count("needs a CUDA device")
    if cuda:
        check("tests/easyckpt's CUDA tests ran", skipped == 0, f"{skipped} of them skipped")
    else:
        report("SKIPPED", "tests/easyckpt's CUDA tests ran", f"no GPU here ({skipped} skipped)")


def tensors(tree, path=""):
    """(path, tensor) of every tensor in nested dicts, lists and tuples."""
    if hasattr(tree, "is_cuda"):
        yield path, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from tensors(v, f"{path}/{k}")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from tensors(v, f"{path}/{i}")


def same_tensors(a, b) -> str:
    """Empty when a and b hold equal tensors at the same paths, on any device; else what differs."""
    a, b = dict(tensors(a)), dict(tensors(b))
    if a.keys() != b.keys():
        return f"different tensors: {sorted(a.keys() ^ b.keys())[:4]}"
    for path, t in a.items():
        if t.dtype != b[path].dtype or not t.cpu().equal(b[path].cpu()):
            return f"{path} differs"
    return ""


def round_trip(torch, Checkpointer, device: str, mode: str, work: Path) -> None:
    """A model and Adam's state saved in `mode`, the next step taken at once, then loaded back."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def train_step():
        opt.zero_grad()
        model(torch.randn(64, 1024, device=device)).square().mean().backward()
        opt.step()

    train_step()  # so that Adam holds state (exp_avg, exp_avg_sq) on the device
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": 1}
    expected = copy.deepcopy(state)
    ckpt = Checkpointer(work / mode, snapshot=mode)
    ckpt.save(1, state)
    train_step()  # deferred mode: the optimizer waits for the copy, then the weights move on
    ckpt.close()
    step, loaded = Checkpointer(work / mode).load_latest()
    stepped = bool(same_tensors(expected["model"], model.state_dict()))  # or it could not fail
    model.load_state_dict(loaded["model"])
    opt.load_state_dict(loaded["opt"])
    differs = same_tensors(expected, loaded) or same_tensors(expected["model"], model.state_dict())
    where = {t.device.type for _, t in tensors(loaded)}
    restored = {p.device.type for p in model.parameters()} | {  # Adam's "step" stays on the CPU
        t.device.type for s in opt.state.values() for t in s.values() if t.dim()}
    ok = (step == 1 and stepped and not differs and where == {"cpu"}
          and restored == {torch.device(device).type})
    check(f"EasyCkpt {mode} mode: {device} model + Adam saved, stepped, loaded back unchanged", ok,
          f"loaded onto {where}, restored onto {restored}" + (f"; {differs}" if differs else ""))


def stall(torch, Checkpointer, device: str, size_mib: int, work: Path) -> None:
    """How long save() blocks the caller, against a synchronous torch.save of the same state."""
    numel = size_mib * (1 << 20) // 4 // 16
    state = {f"layer{i}": torch.rand(numel, device=device) for i in range(16)}
    if device == "cuda":
        torch.cuda.synchronize()  # the random fill must not count as torch.save's time
    sync = timed(lambda: torch.save(state, work / "sync.pt"))
    (work / "sync.pt").unlink()
    print(f"{size_mib} MiB in 16 {device} tensors: torch.save {sync * 1000:.0f} ms")
    for mode in ("deferred", "copy"):
        ckpt = Checkpointer(work / f"stall-{mode}", keep=1, snapshot=mode)
        cold = timed(lambda c=ckpt: c.save(1, state))  # allocates the (pinned) buffers
        ckpt.wait()
        warm = timed(lambda c=ckpt: c.save(2, state))
        write = timed(ckpt.wait)
        ckpt.close()
        print(f"  {mode:8}: save() blocked {warm * 1000:7.1f} ms ({warm / sync:6.1%} of torch.save;"
              f" first save {cold * 1000:.0f} ms), copy and write took {write * 1000:.0f} ms more")
        differs = same_tensors(state, Checkpointer(work / f"stall-{mode}").load_latest()[1])
        shutil.rmtree(work / f"stall-{mode}")
        check(f"EasyCkpt {mode} mode: {size_mib} MiB saved and loaded back unchanged",
              not differs, differs)


def easyckpt_direct(torch, device: str, size_mib: int, work: Path) -> None:
    section(f"EasyCkpt on {device} tensors")
    from easyckpt import Checkpointer

    for mode in ("deferred", "copy", "fork"):  # fork copies a CUDA state in this process instead
        guarded(f"EasyCkpt {mode} round trip", round_trip, torch, Checkpointer, device, mode, work)
    guarded("EasyCkpt stall", stall, torch, Checkpointer, device, size_mib, work)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="where the EasyCkpt checks run")
    p.add_argument("--size-mib", type=int, default=1024, help="state size for the stall timing")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    cuda = bool(torch and torch.cuda.is_available())
    print(f"python {sys.version.split()[0]}, torch {torch.__version__ if torch else '-'}, "
          f"CUDA available: {cuda}, "
          f"CUDA_VISIBLE_DEVICES here: {os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}")
    with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
        work = Path(tmp)
        smi = guarded("nvidia-smi", nvidia_smi) or []
        gpus = guarded("NVML discovery", nvml_discovery, smi, torch) or []
        if torch is None:  # the pod's probe is a torch program
            section("pods through agent.process.ProcessExecutor")
            report("SKIPPED", "pods see their GPUs", "torch is not installed")
        else:
            guarded("pods see their GPUs", pod_gpus, gpus, work)
        guarded("tests/easyckpt", easyckpt_tests, cuda, work)
        if torch is None or (args.device == "cuda" and not cuda):
            section("EasyCkpt on CUDA tensors")
            report("SKIPPED", "EasyCkpt round trips and stall on CUDA", "no GPU here")
        else:
            easyckpt_direct(torch, args.device, args.size_mib, work)
        section("examples/train_easyckpt.py")
        report("SKIPPED", "examples/train_easyckpt.py on CUDA",
               "it has no device flag: its --torch model trains on the CPU")
    failed = results.count("FAIL")
    print(f"\n{results.count('PASS')} passed, {failed} failed, {results.count('SKIPPED')} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
