"""Where the CLI reads its endpoint, AccessKey, workspace and region: the user's config file, with
environment variables winning over it.

The file is JSON at $DLC_CONFIG, else $XDG_CONFIG_HOME/opendlc/dlc.json (~/.config/opendlc/dlc.json),
written with mode 0600 since it holds an AccessKey secret.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dlc_cli.errors import Failure

# Each setting and the variable that overrides it; the AccessKey and region variables are the ones
# Alibaba Cloud's own tools and credential chain read.
SETTINGS = {
    "endpoint": "DLC_ENDPOINT",
    "access_key_id": "ALIBABA_CLOUD_ACCESS_KEY_ID",
    "access_key_secret": "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
    "workspace_id": "DLC_WORKSPACE_ID",
    "region": "ALIBABA_CLOUD_REGION_ID",
}
REQUIRED = ("endpoint", "access_key_id", "access_key_secret")


def path() -> Path:
    if explicit := os.environ.get("DLC_CONFIG"):
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "opendlc" / "dlc.json"


def read_file() -> dict:
    where = path()
    try:
        stored = json.loads(where.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise Failure(f"cannot read {where}: {e}") from None
    if not isinstance(stored, dict):
        raise Failure(f"{where}: must hold a JSON object")
    return {k: v for k, v in stored.items() if k in SETTINGS}


def write_file(changes: dict) -> Path:
    """Merge `changes` (None values left out) into the file, created or rewritten with mode 0600."""
    where = path()
    merged = {**read_file(), **{k: v for k, v in changes.items() if v is not None}}
    where.parent.mkdir(parents=True, exist_ok=True)
    # Opened with 0600 from the start, so the secret is never readable by others, not even briefly.
    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file that existed keeps its old mode through O_CREAT
    with os.fdopen(fd, "w") as out:
        json.dump(merged, out, indent=2)
        out.write("\n")
    return where


def load() -> dict:
    """The settings in force: the file's, each overridden by its variable when that is set."""
    settings = read_file()
    for name, variable in SETTINGS.items():
        if os.environ.get(variable):
            settings[name] = os.environ[variable]
    missing = [name for name in REQUIRED if not settings.get(name)]
    if missing:
        raise Failure(f"no {', '.join(missing)} configured; run `dlc config` or set "
                          + ", ".join(SETTINGS[m] for m in missing))
    return settings
