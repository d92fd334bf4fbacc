"""A crash or a damaged file must never make load_latest return a torn checkpoint."""

import os
import signal

import pytest

from easyckpt import Checkpointer

from .conftest import run_python, start_python

# The child saves step 1, then crashes while writing step 2 at the stage named in argv[2]:
# "chunk" parks the writer after a few chunks (the parent SIGKILLs it), "manifest" calls
# os._exit after the payload is renamed into place but before its manifest exists.
CRASHING_WRITER = r"""
import os, sys, threading
import easyckpt

chunks = 0
def hook(stage, path):
    global chunks
    if "step-2" not in path.name or stage != sys.argv[2]:
        return
    chunks += 1
    if stage == "manifest":
        os._exit(1)
    if chunks == 5:
        print("mid-write", flush=True)
        threading.Event().wait(60)

ckpt = easyckpt.Checkpointer(sys.argv[1], hook=hook)
blob = lambda tag: [bytes([i % 256]) * 4096 for i in range(2000)] + [tag]
ckpt.save(1, {"step": 1, "blob": blob("one")})
ckpt.wait()
ckpt.save(2, {"step": 2, "blob": blob("two")})
ckpt.wait()
"""


def test_a_process_killed_mid_write_leaves_the_previous_checkpoint_loadable(tmp_path):
    child = start_python(CRASHING_WRITER, str(tmp_path), "chunk")
    try:
        assert child.stdout.readline().strip() == "mid-write", child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    partial = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-step-2")]
    assert partial and partial[0].stat().st_size > 0  # the crash really tore a write

    step, state = Checkpointer(tmp_path).load_latest()
    assert (step, state["step"], state["blob"][-1]) == (1, 1, "one")


def test_a_crash_before_the_manifest_is_written_leaves_the_previous_checkpoint_loadable(tmp_path):
    result = run_python(CRASHING_WRITER, str(tmp_path), "manifest")
    assert result.returncode == 1, result.stderr
    assert (tmp_path / "step-2.ckpt").exists() and not (tmp_path / "step-2.json").exists()

    step, state = Checkpointer(tmp_path).load_latest()
    assert (step, state["step"]) == (1, 1)


def test_the_next_checkpoint_cleans_up_what_a_crash_left_behind(tmp_path):
    child = start_python(CRASHING_WRITER, str(tmp_path), "chunk")
    assert child.stdout.readline().strip() == "mid-write"
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(3, {"step": 3})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "progress.json", "step-1.ckpt", "step-1.json", "step-3.ckpt", "step-3.json",
    ]


@pytest.fixture
def two_checkpoints(tmp_path):
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, {"step": 1, "data": list(range(1000))})
        ckpt.save(2, {"step": 2, "data": list(range(1000))})
    return tmp_path


def test_a_truncated_checkpoint_is_skipped_for_the_previous_one(two_checkpoints):
    payload = two_checkpoints / "step-2.ckpt"
    os.truncate(payload, payload.stat().st_size // 2)
    with pytest.warns(RuntimeWarning, match="skipping checkpoint step 2"):
        assert Checkpointer(two_checkpoints).load_latest()[0] == 1


def test_a_checkpoint_with_a_flipped_byte_is_skipped_for_the_previous_one(two_checkpoints):
    payload = two_checkpoints / "step-2.ckpt"
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF
    payload.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="skipping checkpoint step 2"):
        assert Checkpointer(two_checkpoints).load_latest()[0] == 1


def test_a_garbled_manifest_is_skipped_for_the_previous_one(two_checkpoints):
    (two_checkpoints / "step-2.json").write_text('{"step": 2, "fi')
    with pytest.warns(RuntimeWarning, match="skipping checkpoint step 2"):
        assert Checkpointer(two_checkpoints).load_latest()[0] == 1
