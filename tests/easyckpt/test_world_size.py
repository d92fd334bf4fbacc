"""An elastic job resumes a checkpoint written at another world size when its state is replicated,
and is told clearly when it is sharded (easyckpt/world.py)."""

import json

import pytest

from easyckpt import Checkpointer, WorldSizeMismatch


def test_replicated_state_saved_by_eight_ranks_resumes_with_four(tmp_path):
    with Checkpointer(tmp_path, world_size=8, rank=0) as ckpt:
        ckpt.save(40, {"w": [1.0, 2.0]})
    resumed = Checkpointer(tmp_path, world_size=4, rank=0)
    assert resumed.load_latest() == (40, {"w": [1.0, 2.0]})
    assert resumed.loaded_world_size == 8


def test_the_world_comes_from_torchrun_s_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    with Checkpointer(tmp_path, layout="sharded") as ckpt:
        ckpt.save(5, {"part": 2})
    manifest = json.loads((tmp_path / "rank-2" / "step-5.json").read_text())
    assert (manifest["world_size"], manifest["layout"]) == (3, "sharded")


def save_shards(base, world_size, step=10):
    for rank in range(world_size):
        with Checkpointer(base, layout="sharded", world_size=world_size, rank=rank) as ckpt:
            ckpt.save(step, {"part": rank})


def test_each_rank_of_the_same_world_resumes_its_own_shard(tmp_path):
    save_shards(tmp_path, 2)
    assert Checkpointer(tmp_path, layout="sharded", world_size=2, rank=1).load_latest() == (10, {"part": 1})


@pytest.mark.parametrize("world_size, rank", [(4, 0), (4, 3), (1, 0)])
def test_a_sharded_state_is_refused_at_another_world_size_even_by_a_rank_with_no_shard_yet(
        tmp_path, world_size, rank):
    save_shards(tmp_path, 2)
    with pytest.raises(WorldSizeMismatch, match=r"step 10 is sharded \(each of its 2 ranks saved its own part\) "
                                                rf"and this run has {world_size} ranks"):
        Checkpointer(tmp_path, layout="sharded", world_size=world_size, rank=rank).load_latest()


def test_reading_checkpoints_with_the_other_layout_is_refused_rather_than_starting_over(tmp_path):
    save_shards(tmp_path / "sharded", 2)
    with pytest.raises(WorldSizeMismatch, match="saved with layout='sharded'"):
        Checkpointer(tmp_path / "sharded", world_size=2).load_latest()
    with Checkpointer(tmp_path / "replicated") as ckpt:
        ckpt.save(1, {"w": 0})
    with pytest.raises(WorldSizeMismatch, match="saved with layout='replicated'"):
        Checkpointer(tmp_path / "replicated", layout="sharded", world_size=1).load_latest()


def test_a_manifest_written_before_world_sizes_were_recorded_loads_as_one_replica(tmp_path):
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(3, {"w": 1})
    path = tmp_path / "step-3.json"
    old = {k: v for k, v in json.loads(path.read_text()).items() if k not in ("world_size", "layout")}
    path.write_text(json.dumps(old))
    resumed = Checkpointer(tmp_path, world_size=2, rank=1)
    assert resumed.load_latest() == (3, {"w": 1}) and resumed.loaded_world_size == 1


def test_a_rank_outside_the_world_is_refused(tmp_path):
    with pytest.raises(ValueError, match="rank must be 0 to world_size - 1"):
        Checkpointer(tmp_path, world_size=2, rank=2)
