"""A tiny training loop with EasyCkpt: resume, periodic background checkpoints, SIGTERM flush.

    export OPENDLC_CKPT_DIR=/tmp/ck
    python examples/train_easyckpt.py --steps 50 --ckpt-every 5 --sleep 0.05
    # kill -TERM <pid> while it runs, start it again: it continues at the next step, not at 1.

It fits y = 3x + 1 by gradient descent: in pure Python by default, with a torch nn.Linear when
--torch is given. Flags fall back to env EASYCKPT_STEPS, EASYCKPT_CKPT_EVERY, EASYCKPT_SLEEP.
Exits 0 when all steps are done, 143 after a SIGTERM (the final checkpoint is durable by then).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a source checkout

import easyckpt  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=int(env("EASYCKPT_STEPS", 50)))
    p.add_argument("--ckpt-every", type=int, default=int(env("EASYCKPT_CKPT_EVERY", 5)))
    p.add_argument("--sleep", type=float, default=float(env("EASYCKPT_SLEEP", 0.05)))
    p.add_argument("--dir", default=None, help="checkpoint dir (default: env OPENDLC_CKPT_DIR)")
    p.add_argument("--torch", action="store_true", help="train a torch nn.Linear instead")
    return p.parse_args(argv)


def python_model():
    def init():
        return {"step": 0, "w": 0.0, "b": 0.0, "rng": random.Random(0).getstate()}

    def train_step(state, step):
        rng = random.Random()
        rng.setstate(state["rng"])
        x = rng.uniform(-1, 1)
        err = state["w"] * x + state["b"] - (3 * x + 1)
        w, b = state["w"] - 0.1 * err * x, state["b"] - 0.1 * err
        # A new dict, not an update in place: `current` below switches atomically to it.
        return {"step": step, "w": w, "b": b, "rng": rng.getstate()}, err * err

    return init, lambda state: None, train_step


def torch_model(ckpt: easyckpt.Checkpointer):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    # Plain SGD by hand: torch.optim's first use imports torch._dynamo, seconds of startup that
    # this demo does not need. With an optimizer, checkpoint its state_dict() next to the model's;
    # its step() then waits for a pending snapshot by itself.

    def init():
        return {"step": 0, "model": model.state_dict()}

    def restore(state):
        model.load_state_dict(state["model"])

    def train_step(state, step):
        x = torch.rand(8, 1) * 2 - 1
        loss = ((model(x) - (3 * x + 1)) ** 2).mean()
        model.zero_grad()
        loss.backward()
        # The last save() copies the weights in the background: let it finish before changing
        # them in place (torch.optim steps do this themselves).
        ckpt.wait_snapshot()
        with torch.no_grad():  # in place: a SIGTERM landing in these lines saves step-1's label
            for param in model.parameters():
                param -= 0.1 * param.grad
        return {"step": step, "model": model.state_dict()}, loss.item()

    return init, restore, train_step


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    ckpt = easyckpt.Checkpointer(args.dir, keep=3)
    init, restore, train_step = torch_model(ckpt) if args.torch else python_model()

    latest = ckpt.load_latest()
    current = latest or (0, init())
    if latest:
        restore(current[1])
        # Its state is the same on every data-parallel rank, so an elastic job shrunk or grown
        # since the save resumes it as it is (easyckpt/world.py).
        print(f"resumed from step={current[0]} ({ckpt.dir}; saved by {ckpt.loaded_world_size} of "
              f"{ckpt.world_size} rank(s) now)", flush=True)
    # The handler reads `current` when SIGTERM arrives and saves it before the process exits.
    ckpt.install_sigterm_handler(lambda: current)

    start, state = current
    saved = start
    for step in range(start + 1, args.steps + 1):
        time.sleep(args.sleep)  # stands in for the real work of a step
        state, loss = train_step(state, step)
        current = (step, state)  # one assignment: a SIGTERM sees the old step or the new one
        print(f"step={step} loss={loss:.4f}", flush=True)
        if step % args.ckpt_every == 0:
            ckpt.save(step, state)
            saved = step
        easyckpt.report_progress(step)

    if current[0] != saved:
        ckpt.save(*current)
    ckpt.close()
    print(f"done at step={current[0]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
