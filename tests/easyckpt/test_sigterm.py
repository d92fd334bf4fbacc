"""Preemption: the platform sends SIGTERM, then SIGKILL after the grace period."""

import signal
import threading

import pytest

from easyckpt import Checkpointer

from .conftest import printed_steps, run_python, start_example


def preempt_after(child, step: int) -> str:
    """Read the child's output until it prints step=<step>, SIGTERM it, return all it printed."""
    seen = []
    for line in child.stdout:
        seen.append(line)
        if line.startswith(f"step={step} "):
            break
    child.send_signal(signal.SIGTERM)
    rest, _ = child.communicate(timeout=30)
    return "".join(seen) + rest


def test_sigterm_flushes_a_final_checkpoint_of_the_step_being_trained(tmp_path):
    child = start_example(tmp_path, "--steps", "1000", "--ckpt-every", "5", "--sleep", "0.05")
    out = preempt_after(child, 7)
    assert child.returncode == 143, child.stderr.read()
    last = printed_steps(out)[-1]

    step, state = Checkpointer(tmp_path).load_latest()
    assert step == last and state["step"] == last


def test_a_restarted_job_continues_the_step_counter(tmp_path):
    child = start_example(tmp_path, "--steps", "1000", "--ckpt-every", "5", "--sleep", "0.05")
    last = printed_steps(preempt_after(child, 3))[-1]

    child = start_example(tmp_path, "--steps", str(last + 3), "--sleep", "0")
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert f"resumed from step={last}" in out
    assert printed_steps(out) == [last + 1, last + 2, last + 3]


def test_the_example_exits_zero_with_its_last_step_durable(tmp_path):
    child = start_example(tmp_path, "--steps", "7", "--ckpt-every", "5", "--sleep", "0")
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert printed_steps(out) == list(range(1, 8))
    assert Checkpointer(tmp_path).load_latest()[0] == 7


def test_the_example_resumes_its_torch_model(tmp_path):
    pytest.importorskip("torch")
    first = start_example(tmp_path, "--torch", "--steps", "4", "--sleep", "0")
    assert first.wait(60) == 0, first.stderr.read()
    second = start_example(tmp_path, "--torch", "--steps", "6", "--sleep", "0")
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "resumed from step=4" in out and printed_steps(out) == [5, 6]


PREVIOUS_HANDLER = r"""
import os, signal, sys, threading, easyckpt
signal.signal(signal.SIGTERM, lambda s, f: print("previous handler ran", flush=True))
ckpt = easyckpt.Checkpointer(sys.argv[1])
ckpt.install_sigterm_handler(lambda: (3, {"step": 3}))
os.kill(os.getpid(), signal.SIGTERM)
threading.Event().wait(30)
print("not reached")
"""


def test_sigterm_still_runs_the_handler_that_was_there_before(tmp_path):
    result = run_python(PREVIOUS_HANDLER, str(tmp_path))
    assert result.returncode == 143, result.stderr
    assert result.stdout == "previous handler ran\n"
    assert Checkpointer(tmp_path).load_latest() == (3, {"step": 3})


# SIGTERM arrives while the main thread is inside Checkpointer.wait(): the handler must not
# re-enter (it would deadlock on the checkpointer's lock); it flushes once wait() is done.
SIGTERM_DURING_WAIT = r"""
import os, signal, sys, easyckpt
sent = []
def hook(stage, path):
    if stage == "chunk" and not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
ckpt = easyckpt.Checkpointer(sys.argv[1], hook=hook)
ckpt.install_sigterm_handler(lambda: (2, {"step": 2}))
ckpt.save(1, {"step": 1, "rows": [bytes([i % 256]) * 4096 for i in range(4000)]})
ckpt.wait()
print("not reached")
"""


def test_sigterm_during_a_wait_flushes_after_it_instead_of_deadlocking(tmp_path):
    result = run_python(SIGTERM_DURING_WAIT, str(tmp_path))
    assert result.returncode == 143, result.stderr
    assert "not reached" not in result.stdout
    assert Checkpointer(tmp_path).steps() == [1, 2]


def test_installing_the_handler_off_the_main_thread_warns_and_changes_nothing(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    outcome = {}

    def install():
        with pytest.warns(RuntimeWarning, match="only the main thread"):
            outcome["installed"] = Checkpointer(tmp_path).install_sigterm_handler(lambda: None)

    worker = threading.Thread(target=install)
    worker.start()
    worker.join(10)
    assert outcome == {"installed": False}
    assert signal.getsignal(signal.SIGTERM) is before


def test_close_gives_sigterm_back_to_the_previous_handler(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    ckpt = Checkpointer(tmp_path)
    assert ckpt.install_sigterm_handler(lambda: None)
    assert signal.getsignal(signal.SIGTERM) is not before
    ckpt.close()
    assert signal.getsignal(signal.SIGTERM) is before


def test_installing_the_handler_twice_still_exits_once_after_one_flush(tmp_path):
    code = r"""
import os, signal, sys, threading, easyckpt
ckpt = easyckpt.Checkpointer(sys.argv[1])
ckpt.install_sigterm_handler(lambda: (1, {"step": 1}))
ckpt.install_sigterm_handler(lambda: (2, {"step": 2}))
os.kill(os.getpid(), signal.SIGTERM)
threading.Event().wait(30)
"""
    result = run_python(code, str(tmp_path))
    assert result.returncode == 143, result.stderr
    assert Checkpointer(tmp_path).steps() == [2]


def test_a_sigterm_right_after_resuming_does_not_rewrite_the_loaded_checkpoint(tmp_path):
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(5, {"step": 5})
    mtime = (tmp_path / "step-5.ckpt").stat().st_mtime_ns
    code = r"""
import os, signal, sys, threading, easyckpt
ckpt = easyckpt.Checkpointer(sys.argv[1])
current = ckpt.load_latest()
ckpt.install_sigterm_handler(lambda: current)
os.kill(os.getpid(), signal.SIGTERM)
threading.Event().wait(30)
"""
    result = run_python(code, str(tmp_path))
    assert result.returncode == 143, result.stderr
    assert (tmp_path / "step-5.ckpt").stat().st_mtime_ns == mtime
