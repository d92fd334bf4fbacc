import json
import time

import easyckpt
from easyckpt import Checkpointer, read_progress


def test_each_durable_checkpoint_is_recorded_in_the_progress_file(tmp_path):
    before = time.time()
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(4, {"step": 4})
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert progress["step"] == 4
    assert progress["path"] == str(tmp_path / "step-4.ckpt")
    assert before <= progress["time"] <= time.time()


def test_the_platform_can_choose_where_the_progress_file_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENDLC_PROGRESS_FILE", str(tmp_path / "agent" / "progress.json"))
    with Checkpointer(tmp_path / "ckpt") as ckpt:
        ckpt.save(1, {})
    assert read_progress(tmp_path / "agent" / "progress.json")["step"] == 1
    assert not (tmp_path / "ckpt" / "progress.json").exists()


def test_report_progress_records_the_step_without_checkpointing_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENDLC_CKPT_DIR", str(tmp_path))
    with Checkpointer() as ckpt:
        ckpt.save(4, {"step": 4})
    assert easyckpt.report_progress(9) is True
    progress = read_progress(tmp_path / "progress.json")
    assert progress["step"] == 4  # the last checkpoint is still step 4
    assert progress["last_progress"]["step"] == 9
    assert ckpt.steps() == [4]


def test_a_checkpoint_keeps_the_last_reported_progress(tmp_path):
    progress_file = tmp_path / "progress.json"
    easyckpt.report_progress(3, path=progress_file)
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(3, {})
    assert read_progress(progress_file)["last_progress"]["step"] == 3


def test_report_progress_writes_at_most_once_a_second_unless_forced(tmp_path):
    progress_file = tmp_path / "progress.json"
    assert easyckpt.report_progress(1, path=progress_file) is True
    assert easyckpt.report_progress(2, path=progress_file) is False
    assert read_progress(progress_file)["last_progress"]["step"] == 1
    assert easyckpt.report_progress(3, path=progress_file, force=True) is True
    assert read_progress(progress_file)["last_progress"]["step"] == 3


def test_report_progress_writes_next_to_the_checkpoints_of_an_explicit_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Checkpointer(tmp_path / "mine")
    easyckpt.report_progress(2, force=True)
    assert read_progress(tmp_path / "mine" / "progress.json")["last_progress"]["step"] == 2
    assert not (tmp_path / "checkpoints").exists()
