"""A pod's code source: a git repository cloned at a branch or commit before its command runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CLONE_TIMEOUT_S = 600


class CloneError(Exception):
    """The clone failed; the message is git's."""


def clone(repo: str, branch: str, commit: str, dest: Path, *, timeout_s: float = CLONE_TIMEOUT_S) -> None:
    """Clone `repo` into `dest` at `commit` if given, else at `branch` (else its default branch).

    A finished clone is kept: the next pod of the same job on this node uses it. The clone is made
    beside `dest` and renamed into place, so a clone that failed halfway is never taken for one."""
    dest = Path(dest)
    if (dest / ".git").exists():
        return
    partial = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    # "--" ends the options: a repository named "-u..." is a name, not an option.
    _git(["clone", "--quiet", *(["--branch", branch] if branch else []), "--", repo, str(partial)], timeout_s)
    if commit:
        _git(["-C", str(partial), "checkout", "--quiet", "--detach", commit, "--"], timeout_s)
    os.replace(partial, dest)


def _git(args: list[str], timeout_s: float) -> None:
    # No prompt for a password: a repository that asks for one fails at once instead of hanging.
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    try:
        done = subprocess.run(["git", *args], env=env, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise CloneError("git is not installed on this node") from None
    except subprocess.TimeoutExpired:
        raise CloneError(f"git {args[0]} took longer than {timeout_s:g} s") from None
    if done.returncode != 0:
        raise CloneError((done.stderr or done.stdout).strip() or f"git {args[0]} exited with {done.returncode}")
