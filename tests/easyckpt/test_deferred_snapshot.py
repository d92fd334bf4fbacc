"""snapshot="deferred" (the default): save() returns at once, a thread copies the tensors, and
in-place changes wait for that copy (optimizer steps, forward passes, wait_snapshot())."""

import sys
import threading
import time
from pathlib import Path

import pytest

import easyckpt
from easyckpt import Checkpointer, CheckpointWriteError

from .conftest import run_python

torch = pytest.importorskip("torch")

from .test_tensors import assert_same  # noqa: E402

EASYCKPT_DIR = str(Path(easyckpt.__file__).parent)


def parked_writer_hook(stage: str):
    """A hook that parks the writer thread at `stage` ("copy": before its first tensor copy,
    "chunk": at its first payload write) until the test releases it."""
    parked, release = threading.Event(), threading.Event()

    def hook(stage_now, path):
        if stage_now == stage and not release.is_set():
            parked.set()
            assert release.wait(10), "the test never released the writer"

    return hook, parked, release


def wait_until(condition, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def blocked_in_easyckpt(thread: threading.Thread) -> bool:
    """Whether `thread` is currently inside easyckpt's code (i.e. held back by one of its hooks)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_filename.startswith(EASYCKPT_DIR):
            return True
        frame = frame.f_back
    return False


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith(".tmp-")]


def sgd_on(*values: torch.Tensor):
    """Parameters holding `values`, each with a gradient of ones, and an SGD (lr 0.5) over them."""
    params = [torch.nn.Parameter(v.clone()) for v in values]
    for p in params:
        p.grad = torch.ones_like(p)
    return params, torch.optim.SGD(params, lr=0.5)


def test_save_returns_before_the_tensors_are_copied_and_the_write_follows(tmp_path):
    hook, parked, release = parked_writer_hook("copy")
    ckpt = Checkpointer(tmp_path, hook=hook)
    weights = torch.arange(1 << 16, dtype=torch.float32)
    ckpt.save(1, {"w": weights, "step": 1})  # a copy inside save() would never park in a thread
    assert parked.wait(10)  # save() has returned; the copy has not started
    assert ckpt.steps() == []
    release.set()
    ckpt.wait()
    step, state = ckpt.load_latest()
    assert step == 1 and state["step"] == 1 and torch.equal(state["w"], weights)


def test_an_optimizer_step_after_save_waits_for_the_copy_and_the_checkpoint_keeps_the_old_weights(
    tmp_path,
):
    hook, parked, release = parked_writer_hook("copy")
    ckpt = Checkpointer(tmp_path, hook=hook)
    (weight,), opt = sgd_on(torch.ones(1000))
    ckpt.save(1, {"w": weight, "opt": opt.state_dict()})
    assert parked.wait(10)

    stepper = threading.Thread(target=opt.step)
    stepper.start()
    assert wait_until(lambda: blocked_in_easyckpt(stepper)), "the step did not wait"
    assert torch.equal(weight.detach(), torch.ones(1000))
    release.set()
    stepper.join(10)
    assert torch.equal(weight.detach(), torch.full((1000,), 0.5))  # the step did run after
    ckpt.wait()
    assert torch.equal(ckpt.load_latest()[1]["w"], torch.ones(1000))


def test_a_forward_pass_after_save_copies_the_batchnorm_statistics_before_updating_them(tmp_path):
    hook, parked, release = parked_writer_hook("copy")
    ckpt = Checkpointer(tmp_path, hook=hook)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ckpt.save(1, model.state_dict())
    assert parked.wait(10)  # the writer holds the first tensor; the forward pass runs now
    model(torch.randn(8, 3))  # updates running_mean, running_var, num_batches_tracked in place
    release.set()
    ckpt.wait()
    assert_same(ckpt.load_latest()[1], before)
    assert model.state_dict()["1.num_batches_tracked"] == 1


def test_a_tensor_changed_in_place_before_its_copy_fails_that_checkpoint_and_writes_nothing(
    tmp_path,
):
    hook, parked, release = parked_writer_hook("copy")
    ckpt = Checkpointer(tmp_path, hook=hook)
    weights = torch.ones(1000)
    release.set()  # step 0 goes through
    ckpt.save(0, {"w": weights})
    ckpt.wait()
    release.clear()
    ckpt.save(1, {"w": weights})
    assert parked.wait(10)
    weights.mul_(7)  # no optimizer and no wait_snapshot(): the copy has not run yet
    with pytest.warns(RuntimeWarning, match=r"step 1 is not written: tensor state\['w'\] was"):
        release.set()
        with pytest.raises(CheckpointWriteError, match="step 1 .*changed in place"):
            ckpt.wait()
    assert ckpt.steps() == [0] and not temp_files(tmp_path)
    assert torch.equal(ckpt.load_latest()[1]["w"], torch.ones(1000))

    ckpt.save(2, {"w": weights})  # the next snapshot is taken afresh
    ckpt.wait()
    assert torch.equal(ckpt.load_latest()[1]["w"], torch.full((1000,), 7.0))


def test_a_tensor_changed_in_place_before_the_commit_without_waiting_fails_that_checkpoint(
    tmp_path,
):
    hook, parked, release = parked_writer_hook("chunk")
    ckpt = Checkpointer(tmp_path, hook=hook)
    weights = torch.ones(1000)
    ckpt.save(1, {"w": weights})
    assert parked.wait(10)  # copied, being written
    weights.mul_(7)  # harmless by now, but it could as well have raced with the copy
    release.set()
    with pytest.warns(RuntimeWarning, match="step 1 is not written"):
        with pytest.raises(CheckpointWriteError, match="changed in place"):
            ckpt.wait()
    assert ckpt.steps() == [] and not temp_files(tmp_path)


def test_wait_snapshot_lets_the_caller_change_tensors_in_place_before_the_write_ends(tmp_path):
    hook, parked, release = parked_writer_hook("chunk")
    ckpt = Checkpointer(tmp_path, hook=hook)
    weights = torch.ones(1000)
    ckpt.save(1, {"w": weights})
    ckpt.wait_snapshot()
    weights.mul_(7)
    assert parked.wait(10)  # the write is not committed yet
    release.set()
    ckpt.wait()
    assert torch.equal(ckpt.load_latest()[1]["w"], torch.ones(1000))


def test_views_are_saved_with_their_own_values(tmp_path):
    base = torch.arange(10, dtype=torch.float32)
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, {"base": base, "head": base[:3], "odd": base[1::2]})
    state = Checkpointer(tmp_path).load_latest()[1]
    assert torch.equal(state["base"], base)
    assert torch.equal(state["head"], base[:3]) and torch.equal(state["odd"], base[1::2])


def test_a_change_through_a_view_of_a_saved_tensor_is_caught(tmp_path):
    hook, parked, release = parked_writer_hook("copy")
    ckpt = Checkpointer(tmp_path, hook=hook)
    base = torch.zeros(10)
    ckpt.save(1, {"base": base})
    assert parked.wait(10)
    base[2:5].add_(1)  # a view shares its base's version counter
    release.set()
    with pytest.warns(RuntimeWarning, match=r"tensor state\['base'\]"):
        with pytest.raises(CheckpointWriteError, match="changed in place"):
            ckpt.wait()
    assert ckpt.steps() == []


def test_an_optimizer_over_views_of_a_flat_buffer_waits_for_their_copy(tmp_path):
    flat = torch.ones(20)
    (weight,), opt = sgd_on(torch.ones(20))
    weight.data = flat  # the parameter now is the flat buffer; the state saves views of it
    hook, parked, release = parked_writer_hook("copy")
    ckpt = Checkpointer(tmp_path, hook=hook)
    ckpt.save(1, {"a": weight.detach()[:10], "b": weight.detach()[10:]})
    assert parked.wait(10)
    stepper = threading.Thread(target=opt.step)
    stepper.start()
    assert wait_until(lambda: blocked_in_easyckpt(stepper)), "the step did not wait"
    release.set()
    stepper.join(10)
    ckpt.wait()
    state = ckpt.load_latest()[1]
    assert torch.equal(state["a"], torch.ones(10)) and torch.equal(state["b"], torch.ones(10))
    assert torch.equal(flat, torch.full((20,), 0.5))


def test_a_writer_thread_that_cannot_start_leaves_no_snapshot_holding_steps_back(
    tmp_path, monkeypatch
):
    ckpt = Checkpointer(tmp_path)
    (weight,), opt = sgd_on(torch.ones(10))

    def no_thread_left(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread_left)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        ckpt.save(1, {"w": weight})
    monkeypatch.undo()
    stepper = threading.Thread(target=opt.step)
    stepper.start()
    stepper.join(10)
    assert not stepper.is_alive(), "the step waits for a copy that will never run"
    ckpt.wait()
    assert ckpt.steps() == []


# The writer sends SIGTERM once the main thread is held back in the optimizer's pre-step hook: the
# handler must wait for the snapshot, flush a final checkpoint and exit, without deadlocking.
SIGTERM_WHILE_A_STEP_WAITS = r"""
import os, signal, sys, threading, time, torch, easyckpt

w = torch.nn.Parameter(torch.ones(1000))
w.grad = torch.ones(1000)
opt = torch.optim.SGD([w], lr=0.5)
main = threading.main_thread()

def main_waits_in_the_hook():
    frame = sys._current_frames()[main.ident]
    while frame is not None:
        if frame.f_code.co_filename.endswith("deferred.py"):
            return True
        frame = frame.f_back
    return False

sent = []
def hook(stage, path):
    if stage == "copy" and not sent:
        sent.append(1)
        deadline = time.monotonic() + 10
        while not main_waits_in_the_hook() and time.monotonic() < deadline:
            time.sleep(0.005)
        print("main waits" if main_waits_in_the_hook() else "main does not wait", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

ckpt = easyckpt.Checkpointer(sys.argv[1], hook=hook)
ckpt.install_sigterm_handler(lambda: (2, {"w": w}))
ckpt.save(1, {"w": w})
opt.step()
print("not reached")
"""


def test_sigterm_while_an_optimizer_step_waits_for_the_snapshot_flushes_and_exits(tmp_path):
    result = run_python(SIGTERM_WHILE_A_STEP_WAITS, str(tmp_path))
    assert result.returncode == 143, result.stderr
    assert result.stdout == "main waits\n"
    ckpt = Checkpointer(tmp_path)
    assert ckpt.steps() == [1, 2]
    assert torch.equal(ckpt.load_latest()[1]["w"], torch.ones(1000))  # the step never ran


SIGTERM_RIGHT_AFTER_SAVE = r"""
import os, signal, sys, threading, torch, easyckpt
ckpt = easyckpt.Checkpointer(sys.argv[1])
ckpt.install_sigterm_handler(lambda: (2, {"w": torch.full((1 << 16,), 2.0)}))
ckpt.save(1, {"w": torch.full((1 << 16,), 1.0)})
os.kill(os.getpid(), signal.SIGTERM)
threading.Event().wait(30)
print("not reached")
"""


def test_sigterm_right_after_a_deferred_save_writes_it_then_flushes_the_current_step(tmp_path):
    result = run_python(SIGTERM_RIGHT_AFTER_SAVE, str(tmp_path))
    assert result.returncode == 143, result.stderr
    ckpt = Checkpointer(tmp_path)
    assert ckpt.steps() == [1, 2]
    assert torch.equal(ckpt.load_latest()[1]["w"], torch.full((1 << 16,), 2.0))


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_an_optimizer_step_after_a_deferred_save_of_cuda_tensors_keeps_the_old_values(tmp_path):
    (weight,), opt = sgd_on(torch.ones(1 << 20, device="cuda"))
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, {"w": weight})
        opt.step()  # waits for the device-to-host copy
    loaded = Checkpointer(tmp_path).load_latest()[1]["w"]
    assert loaded.device.type == "cpu" and torch.equal(loaded, torch.ones(1 << 20))
    assert torch.equal(weight.detach().cpu(), torch.full((1 << 20,), 0.5))


@cuda
def test_a_cuda_tensor_changed_in_place_without_waiting_fails_that_checkpoint(tmp_path):
    hook, parked, release = parked_writer_hook("chunk")
    ckpt = Checkpointer(tmp_path, hook=hook)
    weights = torch.ones(1 << 20, device="cuda")
    ckpt.save(1, {"w": weights})
    weights.mul_(7)  # queued on the default stream, not ordered after the side stream's copy
    release.set()
    with pytest.warns(RuntimeWarning, match="step 1 is not written"):
        with pytest.raises(CheckpointWriteError, match="changed in place"):
            ckpt.wait()
    assert ckpt.steps() == []
