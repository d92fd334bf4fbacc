import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_easyckpt.py"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Each test decides where checkpoints and progress go; the host's env does not leak in."""
    monkeypatch.delenv("OPENDLC_CKPT_DIR", raising=False)
    monkeypatch.delenv("OPENDLC_PROGRESS_FILE", raising=False)


def child_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENDLC_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run_python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(**env),
    )


def start_python(code: str, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=child_env(**env),
    )


def start_example(ckpt_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env=child_env(OPENDLC_CKPT_DIR=str(ckpt_dir)),
    )


def printed_steps(stdout: str) -> list[int]:
    lines = (line for line in stdout.splitlines() if line.startswith("step="))
    return [int(line.split()[0][len("step="):]) for line in lines]
