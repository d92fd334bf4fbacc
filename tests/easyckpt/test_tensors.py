import pytest

torch = pytest.importorskip("torch")

from easyckpt import Checkpointer  # noqa: E402

from .test_checkpointer import blocking_hook  # noqa: E402


def tensor_state():
    return {
        "step": 5,
        "weights": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "counts": torch.tensor([1, 2, 3], dtype=torch.int64),
        "half": torch.ones(4, dtype=torch.bfloat16),
        "history": [torch.zeros(2), "note", {"lr": 0.1}],
    }


def assert_same(a, b):
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("reuse_buffers", [True, False], ids=["buffer-pool", "clone"])
def test_it_loads_back_the_cpu_tensors_it_saved(tmp_path, reuse_buffers):
    with Checkpointer(tmp_path, reuse_buffers=reuse_buffers, snapshot="copy") as ckpt:
        ckpt.save(5, tensor_state())
    step, state = Checkpointer(tmp_path).load_latest()
    assert step == 5
    assert_same(state, tensor_state())


def test_changing_a_tensor_in_place_after_save_does_not_change_the_checkpoint(tmp_path):
    hook, started, release = blocking_hook()  # parks a writer thread: the copy mode's
    ckpt = Checkpointer(tmp_path, snapshot="copy", hook=hook)
    weights = torch.ones(1000)
    ckpt.save(1, {"w": weights})
    weights.mul_(7)  # an optimizer step while the write is still parked
    release.set()
    assert torch.equal(ckpt.load_latest()[1]["w"], torch.ones(1000))


def test_reused_buffers_do_not_overwrite_the_previous_checkpoint(tmp_path):
    with Checkpointer(tmp_path, snapshot="copy") as ckpt:
        ckpt.save(1, {"w": torch.full((100,), 1.0)})
        ckpt.save(2, {"w": torch.full((100,), 2.0)})
    (tmp_path / "step-2.json").unlink()  # make step 1 the newest complete one
    step, state = Checkpointer(tmp_path).load_latest()
    assert step == 1 and torch.equal(state["w"], torch.full((100,), 1.0))


def test_tied_tensors_come_back_tied(tmp_path):
    shared = torch.randn(4)
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, {"embed": shared, "lm_head": shared})
    state = Checkpointer(tmp_path).load_latest()[1]
    assert state["embed"].data_ptr() == state["lm_head"].data_ptr()


def test_a_model_and_optimizer_resume_from_their_state_dicts(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, {"model": model.state_dict(), "opt": opt.state_dict()})

    state = Checkpointer(tmp_path).load_latest()[1]
    clone = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    clone.load_state_dict(state["model"])
    clone_opt = torch.optim.Adam(clone.parameters())
    clone_opt.load_state_dict(state["opt"])
    assert_same(clone.state_dict(), model.state_dict())
    assert clone_opt.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_cuda_tensors_come_back_on_the_cpu_with_the_same_values(tmp_path):
    weights = torch.randn(1024, 1024, device="cuda")
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, {"w": weights})
    loaded = Checkpointer(tmp_path).load_latest()[1]["w"]
    assert loaded.device.type == "cpu" and torch.equal(loaded, weights.cpu())


@cuda
def test_changing_a_cuda_tensor_after_save_does_not_change_the_checkpoint(tmp_path):
    hook, started, release = blocking_hook()
    ckpt = Checkpointer(tmp_path, snapshot="copy", hook=hook)  # deferred: test_deferred_snapshot
    weights = torch.ones(1 << 20, device="cuda")
    ckpt.save(1, {"w": weights})
    weights.mul_(7)
    release.set()
    assert torch.equal(ckpt.load_latest()[1]["w"], torch.ones(1 << 20))
