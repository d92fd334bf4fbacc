"""snapshot="fork": a forked child writes the copy-on-write image; "auto" picks it when safe."""

import os
import select
import signal
from pathlib import Path

import pytest

from easyckpt import Checkpointer, CheckpointWriteError

from .conftest import run_python

torch = pytest.importorskip("torch")

from .test_tensors import assert_same, tensor_state  # noqa: E402


@pytest.fixture
def forks():
    """A process that started CUDA never forks its writer (Checkpointer._forks copies instead), so
    a test of the forked child has none to test once an earlier test of this run started CUDA; a
    hook meant for the child would then run in pytest itself (one SIGKILLs its process)."""
    if torch.cuda.is_initialized():
        pytest.skip("CUDA was started in this process by an earlier test: no writer is forked")


def pid_recording_hook(pid_file: Path):
    """A hook that writes the id of the process writing the payload into pid_file."""
    def hook(stage, path):
        if stage == "manifest":
            pid_file.write_text(str(os.getpid()))

    return hook


def writer_pid(ckpt_dir: Path, pid_file: Path, state, **options) -> int:
    with Checkpointer(ckpt_dir, hook=pid_recording_hook(pid_file), **options) as ckpt:
        ckpt.save(1, state)
    return int(pid_file.read_text())


def parked_child_hook():
    """A hook that parks the forked writer at its first chunk until the test writes to `release`."""
    read_fd, release = os.pipe()
    parked = []

    def hook(stage, path):
        if stage == "chunk" and not parked:
            parked.append(1)
            # In the child: wait for the parent's byte (10 s at most, so a broken test ends).
            assert select.select([read_fd], [], [], 10)[0], "the test never released the child"

    return hook, release


@pytest.mark.usefixtures("forks")
def test_fork_mode_loads_back_the_tensors_and_objects_it_saved(tmp_path):
    with Checkpointer(tmp_path, snapshot="fork") as ckpt:
        ckpt.save(5, tensor_state())
    step, state = Checkpointer(tmp_path).load_latest()
    assert step == 5
    assert_same(state, tensor_state())


@pytest.mark.usefixtures("forks")
def test_fork_mode_also_writes_plain_python_states(tmp_path):
    state = {"weights": [0.5, -1.0], "meta": ("adam", {"lr": 1e-3})}
    with Checkpointer(tmp_path, snapshot="fork") as ckpt:
        ckpt.save(2, state)
    assert Checkpointer(tmp_path).load_latest() == (2, state)


@pytest.mark.usefixtures("forks")
def test_a_forked_save_returns_while_the_child_is_still_writing(tmp_path):
    hook, release = parked_child_hook()
    ckpt = Checkpointer(tmp_path, snapshot="fork", hook=hook)
    ckpt.save(1, {"w": torch.ones(10)})  # would hang if save waited for the parked child
    assert ckpt.steps() == []
    os.write(release, b"x")
    ckpt.wait()
    assert ckpt.steps() == [1]
    assert ckpt.load_latest()[0] == 1


@pytest.mark.usefixtures("forks")
def test_changes_made_right_after_a_forked_save_do_not_leak_into_the_checkpoint(tmp_path):
    hook, release = parked_child_hook()
    ckpt = Checkpointer(tmp_path, snapshot="fork", hook=hook)
    weights, history = torch.ones(1 << 16), [1]
    ckpt.save(1, {"w": weights, "history": history})
    weights.add_(1)  # an optimizer step while the child still has not written a byte
    history.append(2)
    os.write(release, b"x")
    state = ckpt.load_latest()[1]
    assert torch.equal(state["w"], torch.ones(1 << 16)) and state["history"] == [1]


@pytest.mark.usefixtures("forks")
def test_a_child_killed_mid_write_leaves_the_previous_checkpoint_and_the_next_call_raises(tmp_path):
    def killed_at_step_2(stage, path):
        if stage == "chunk" and "step-2" in path.name:
            os.kill(os.getpid(), signal.SIGKILL)  # in the child: the parent lives on

    ckpt = Checkpointer(tmp_path, snapshot="fork", hook=killed_at_step_2)
    ckpt.save(1, {"w": torch.full((1000,), 1.0)})
    ckpt.save(2, {"w": torch.full((1000,), 2.0)})
    with pytest.raises(CheckpointWriteError, match="step 2.*killed by SIGKILL"):
        ckpt.wait()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-step-2")]  # really torn

    step, state = ckpt.load_latest()
    assert step == 1 and torch.equal(state["w"], torch.full((1000,), 1.0))
    ckpt.save(3, {"w": torch.full((1000,), 3.0)})
    ckpt.wait()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.usefixtures("forks")
def test_an_error_raised_in_the_writer_child_is_reported_by_the_next_call(tmp_path):
    def disk_full(stage, path):
        if stage == "chunk" and "step-2" in path.name:
            raise OSError(28, "No space left on device")

    ckpt = Checkpointer(tmp_path, snapshot="fork", hook=disk_full)
    ckpt.save(1, {"w": torch.ones(3)})
    ckpt.save(2, {"w": torch.ones(3)})
    with pytest.raises(CheckpointWriteError, match="step 2.*No space left"):
        ckpt.save(3, {"w": torch.ones(3)})
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert ckpt.load_latest()[0] == 1


def test_the_default_copies_cpu_tensors_in_process(tmp_path):
    pid = writer_pid(tmp_path / "ckpt", tmp_path / "pid", {"w": torch.ones(4)})
    assert pid == os.getpid()


@pytest.mark.usefixtures("forks")
def test_auto_writes_cpu_tensors_from_a_forked_child(tmp_path):
    pid = writer_pid(tmp_path / "ckpt", tmp_path / "pid", {"w": torch.ones(4)}, snapshot="auto")
    assert pid != os.getpid()


def test_auto_copies_a_plain_python_state_instead_of_forking(tmp_path):
    pid = writer_pid(tmp_path / "ckpt", tmp_path / "pid", {"w": [1.0, 2.0]}, snapshot="auto")
    assert pid == os.getpid()


def test_auto_copies_once_cuda_is_initialized_because_a_forked_child_cannot_use_it(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    for mode in ("auto", "fork"):
        pid = writer_pid(tmp_path / mode, tmp_path / "pid", {"w": torch.ones(4)}, snapshot=mode)
        assert pid == os.getpid()


def test_auto_copies_where_the_platform_has_no_fork(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "fork")
    pid = writer_pid(tmp_path / "ckpt", tmp_path / "pid", {"w": torch.ones(4)}, snapshot="auto")
    assert pid == os.getpid()


def test_fork_mode_is_refused_where_the_platform_has_no_fork(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "fork")
    with pytest.raises(ValueError, match="snapshot='fork' needs os.fork"):
        Checkpointer(tmp_path, snapshot="fork")


def test_an_unknown_snapshot_mode_is_refused_with_the_allowed_ones(tmp_path):
    allowed = r"\('deferred', 'copy', 'fork', 'auto'\)"
    with pytest.raises(ValueError, match=f"snapshot must be one of {allowed}"):
        Checkpointer(tmp_path, snapshot="cow")


SIGTERM_IN_FORK_MODE = r"""
import os, signal, sys, threading, torch, easyckpt
ckpt = easyckpt.Checkpointer(sys.argv[1], snapshot="fork")
ckpt.install_sigterm_handler(lambda: (2, {"w": torch.full((4,), 2.0)}))
ckpt.save(1, {"w": torch.full((4,), 1.0)})
os.kill(os.getpid(), signal.SIGTERM)
threading.Event().wait(30)
print("not reached")
"""


def test_sigterm_in_fork_mode_waits_for_the_child_and_flushes_the_current_step(tmp_path):
    result = run_python(SIGTERM_IN_FORK_MODE, str(tmp_path))
    assert result.returncode == 143, result.stderr
    assert "not reached" not in result.stdout
    step, state = Checkpointer(tmp_path).load_latest()
    assert Checkpointer(tmp_path).steps() == [1, 2]
    assert step == 2 and torch.equal(state["w"], torch.full((4,), 2.0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_copies_cuda_tensors_off_the_gpu_in_this_process(tmp_path):
    weights = torch.randn(1024, device="cuda")
    pid = writer_pid(tmp_path / "ckpt", tmp_path / "pid", {"w": weights}, snapshot="auto")
    assert pid == os.getpid()
    loaded = Checkpointer(tmp_path / "ckpt").load_latest()[1]["w"]
    assert loaded.device.type == "cpu" and torch.equal(loaded, weights.cpu())
