"""Container image references and registry credentials, for the platform and the agent alike.

The platform refuses a job whose Image is not a valid reference with `reference_problem` (the same
grammar the runtimes parse, so a job it accepts is one an agent can try to pull); the agent writes a
job's ImageConfig credentials into a private auth file for one pull with `auth_file`.

The grammar is distribution/reference's (the one Docker and Podman share), written out here as one
regular expression: the PyPI clients of Docker and Podman split a reference but do not validate it,
and a dependency for one expression would cost more than it saves.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

MAX_NAME = 255
MAX_REFERENCE = 512  # a whole reference, as JobSpec.image keeps it
DEFAULT_REGISTRY = "docker.io"

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(
    rf"^(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
EXAMPLE = "registry.example.com/team/pytorch:2.3-cuda12 or pytorch/pytorch@sha256:<hex>"


def _has_domain(ref: str) -> bool:
    """Whether the first path component names a registry (as distribution/reference decides)."""
    first, slash, _ = ref.partition("/")
    return bool(slash) and ("." in first or ":" in first or first == "localhost" or first != first.lower())


def reference_problem(ref) -> str | None:
    """Why `ref` is not an image reference, or None when it is one."""
    if not isinstance(ref, str) or not ref.strip():
        return f"is required: a container image such as {EXAMPLE}"
    if ref != ref.strip():
        return f"must not start or end with spaces, got {ref!r}"
    if len(ref) > MAX_REFERENCE:
        return f"is {len(ref)} characters long; at most {MAX_REFERENCE} allowed"
    match = REFERENCE.fullmatch(ref)
    # Without a registry in front, an upper-case letter is not allowed anywhere in the name.
    if match is None or (not _has_domain(ref) and match["name"] != match["name"].lower()):
        return f"is not a valid image reference (such as {EXAMPLE}), got {ref!r}"
    if len(match["name"]) > MAX_NAME:
        return f"its repository name must be at most {MAX_NAME} characters"
    return None


CONFIG_KEYS = ("DockerRegistry", "Username", "Password", "Auth")


def config_problem(config) -> str | None:
    """Why an ImageConfig cannot be used to pull, or None when it can (or is empty)."""
    if config in (None, {}):
        return None
    if not isinstance(config, dict):
        return "must be an object {DockerRegistry, Username, Password} or {DockerRegistry, Auth}"
    if unknown := sorted(set(config) - set(CONFIG_KEYS)):
        return f"unknown keys {unknown}; allowed: {', '.join(CONFIG_KEYS)}"
    if bad := sorted(k for k, v in config.items() if v is not None and not isinstance(v, str)):
        return f"{', '.join(bad)} must be text"
    if registry := config.get("DockerRegistry"):
        if REFERENCE.fullmatch(f"{registry}/x") is None or not _has_domain(f"{registry}/x"):
            return f"DockerRegistry must be a registry host such as registry.example.com:5000, got {registry!r}"
    if config.get("Auth") and credentials({"Auth": config["Auth"]}) is None:
        return "Auth must be base64 of username:password"
    if bool(config.get("Username")) != bool(config.get("Password")):
        return "give Username and Password together (or Auth)"
    if credentials(config) is None:
        return "carries no credentials: give Username and Password, or Auth"
    return None


def registry_of(ref: str) -> str:
    """The registry a reference is pulled from (docker.io when it names none)."""
    return ref.split("/", 1)[0] if _has_domain(ref) else DEFAULT_REGISTRY


def credentials(image_config: dict | None) -> tuple[str, str] | None:
    """(username, password) from PAI's ImageConfig (Username and Password, or Auth: base64 of
    user:password), or None when it carries none."""
    if not image_config:
        return None
    user, password = image_config.get("Username") or "", image_config.get("Password") or ""
    if not (user and password) and image_config.get("Auth"):
        try:
            user, _, password = base64.b64decode(image_config["Auth"]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
    return (user, password) if user and password else None


def auth_file(directory: Path, image: str, image_config: dict | None) -> Path | None:
    """Write the credentials for `image`'s registry into `directory`/config.json (mode 0600), in the
    format both Docker (`--config DIR`) and Podman (`--authfile FILE`) read; None without any.

    The credentials go to a file only the agent can read, never on a command line, where any user
    of the node could see them in the process list."""
    found = credentials(image_config)
    if found is None:
        return None
    registry = (image_config or {}).get("DockerRegistry") or registry_of(image)
    token = base64.b64encode(f"{found[0]}:{found[1]}".encode()).decode()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"auths": {registry: {"auth": token}}}, f)
    return path
