import threading
from collections import namedtuple

import pytest

from easyckpt import Checkpointer, CheckpointWriteError

Point = namedtuple("Point", "x y")


def plain_state(step):
    return {
        "step": step,
        "weights": [0.5, -1.25, 3.0],
        "meta": ("adam", {"lr": 1e-3}),
        "p": Point(1, 2),
    }


def test_it_loads_back_the_plain_objects_it_saved(tmp_path):
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(7, plain_state(7))
    assert Checkpointer(tmp_path).load_latest() == (7, plain_state(7))


def test_it_returns_none_when_there_is_no_checkpoint_yet(tmp_path):
    assert Checkpointer(tmp_path / "fresh").load_latest() is None


def test_it_loads_the_newest_step_not_the_newest_file(tmp_path):
    with Checkpointer(tmp_path) as ckpt:
        for step in (9, 10, 2):
            ckpt.save(step, {"step": step})
    assert Checkpointer(tmp_path).load_latest()[0] == 10


def test_it_keeps_only_the_last_n_checkpoints(tmp_path):
    with Checkpointer(tmp_path, keep=2) as ckpt:
        for step in range(1, 6):
            ckpt.save(step, {"step": step})
    assert ckpt.steps() == [4, 5]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["progress.json", "step-4.ckpt", "step-4.json", "step-5.ckpt", "step-5.json"]


def test_it_rejects_keeping_zero_checkpoints(tmp_path):
    with pytest.raises(ValueError, match="keep must be at least 1"):
        Checkpointer(tmp_path, keep=0)


def test_it_rejects_a_negative_step(tmp_path):
    with pytest.raises(ValueError, match="non-negative int"):
        Checkpointer(tmp_path).save(-1, {})


def test_it_uses_the_directory_the_platform_gives_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENDLC_CKPT_DIR", str(tmp_path / "job-42"))
    assert Checkpointer().dir == tmp_path / "job-42"


def test_it_falls_back_to_checkpoints_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Checkpointer().dir == tmp_path / "checkpoints"


def blocking_hook():
    """A write hook that stalls the writer at its first chunk until the test releases it."""
    started, release = threading.Event(), threading.Event()

    def hook(stage, path):
        if stage == "chunk" and not release.is_set():
            started.set()
            assert release.wait(10), "the test never released the writer"

    return hook, started, release


def test_save_returns_while_the_write_is_still_in_progress(tmp_path):
    hook, started, release = blocking_hook()
    ckpt = Checkpointer(tmp_path, hook=hook)
    ckpt.save(1, {"step": 1})  # would hang here for 10 s if the write were synchronous
    assert started.wait(10)
    assert ckpt.steps() == []  # not committed: the writer is parked mid-write
    release.set()
    ckpt.wait()
    assert ckpt.steps() == [1]


def test_saves_issued_during_a_write_wait_their_turn_and_none_is_dropped(tmp_path):
    hook, started, release = blocking_hook()
    ckpt = Checkpointer(tmp_path, keep=5, hook=hook)
    ckpt.save(1, {"step": 1})
    assert started.wait(10)
    trainer = threading.Thread(target=lambda: (ckpt.save(2, {"step": 2}), ckpt.save(3, {"step": 3})))
    trainer.start()
    release.set()
    trainer.join(10)
    ckpt.wait()
    assert ckpt.steps() == [1, 2, 3]


def test_changes_made_after_save_returns_do_not_leak_into_the_checkpoint(tmp_path):
    hook, started, release = blocking_hook()
    ckpt = Checkpointer(tmp_path, hook=hook)
    state = {"weights": [1.0, 2.0], "opt": {"m": [0.0]}}
    ckpt.save(1, state)
    state["weights"][0] = 99.0
    state["opt"]["m"].append(5.0)
    release.set()
    assert ckpt.load_latest() == (1, {"weights": [1.0, 2.0], "opt": {"m": [0.0]}})


def test_a_failed_write_is_reported_by_the_next_call_and_leaves_no_temp_file(tmp_path):
    def disk_full(stage, path):
        if stage == "chunk" and "step-2" in path.name:
            raise OSError(28, "No space left on device")

    ckpt = Checkpointer(tmp_path, hook=disk_full)
    ckpt.save(1, {"step": 1})
    ckpt.save(2, {"step": 2})
    with pytest.raises(CheckpointWriteError, match="step 2.*No space left"):
        ckpt.wait()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert ckpt.load_latest() == (1, {"step": 1})


def test_saving_a_step_again_replaces_it(tmp_path):
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(3, {"v": "first"})
        ckpt.save(3, {"v": "second"})
    assert Checkpointer(tmp_path).load_latest() == (3, {"v": "second"})
