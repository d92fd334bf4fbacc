"""An agent's credential and what it protects on the broker: the one home of the wire format both
sides use (the agent here, the platform in jobs/agents.py).

Each agent holds a join token that an admin issued for its node (`manage.py register_node`); the
simulated agent holds the one issued for "simulated". Two keys derive from the token:

- agent -> platform: every task's argument is an envelope {agent, at, body, sig}: `body` is the
  batch as JSON text, `sig` HMAC-SHA256 over the task name, the agent, the time and the body, so a
  batch cannot be altered, claimed by another agent, or replayed as another task; the platform
  refuses one older than its replay window.
- platform -> agent: start and stop messages are Fernet tokens (AES and an HMAC) of {task, items},
  so only that node's agent reads them (a start message carries the job's secret `Envs`) and only
  the platform writes them (a start message runs a command on the node).

One envelope or token per batch, never per pod: the simulated agent moves thousands of pods a second.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken

SIMULATED = "simulated"  # the simulated agent's name: its queue is agent.simulated


class Refused(Exception):
    """A message that is not what its sender's key says: forged, altered, replayed or too old."""


@dataclass(frozen=True)
class Keys:
    sign: bytes
    seal: Fernet


@lru_cache(maxsize=1024)
def keys(token: str) -> Keys:
    """The two keys of a token (HKDF-like: one HMAC per purpose, so neither key reveals the other)."""
    secret = token.encode()
    seal_key = hmac.new(secret, b"opendlc-agent-seal", hashlib.sha256).digest()
    return Keys(sign=hmac.new(secret, b"opendlc-agent-sign", hashlib.sha256).digest(),
                seal=Fernet(base64.urlsafe_b64encode(seal_key)))


def _mac(key: bytes, task: str, agent: str, at: int, body: str) -> str:
    message = f"{task}\n{agent}\n{at}\n".encode() + body.encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sign(token: str, agent: str, task: str, items, now: float | None = None) -> dict:
    """The envelope of one batch (or one heartbeat) that `agent` sends as `task`."""
    at = int(now if now is not None else time.time())
    body = json.dumps(items, separators=(",", ":"))
    return {"agent": agent, "at": at, "body": body, "sig": _mac(keys(token).sign, task, agent, at, body)}


def claimed_agent(envelope) -> str:
    """Who the envelope says sent it, before anything is verified (to look the key up)."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("agent"), str):
        raise Refused("not a signed envelope (an agent older than agent credentials, or a forgery)")
    return envelope["agent"]


def verify(token: str, task: str, envelope: dict, max_age_s: float, now: float | None = None):
    """The body of an envelope signed with this token for this task, no older than max_age_s."""
    now = now if now is not None else time.time()
    at, body, sig = envelope.get("at"), envelope.get("body"), envelope.get("sig")
    if not (isinstance(at, int) and isinstance(body, str) and isinstance(sig, str)):
        raise Refused("the envelope lacks at, body or sig")
    expected = _mac(keys(token).sign, task, envelope["agent"], at, body)
    if not hmac.compare_digest(expected, sig):
        raise Refused("bad signature")
    if abs(now - at) > max_age_s:
        raise Refused(f"signed {now - at:.0f} s ago, outside the {max_age_s:.0f} s replay window")
    return json.loads(body)


def seal(token: str, task: str, items: list) -> str:
    return keys(token).seal.encrypt(json.dumps({"task": task, "items": items}, separators=(",", ":")).encode()).decode()


def unseal(token: str, task: str, sealed, max_age_s: float) -> list:
    """The items of a message sealed for this token's holder as `task`, no older than max_age_s."""
    try:
        message = json.loads(keys(token).seal.decrypt(str(sealed).encode(), ttl=int(max_age_s)))
    except (InvalidToken, TypeError, ValueError):
        raise Refused("not sealed with this agent's key, or older than the replay window") from None
    if message.get("task") != task:
        raise Refused(f"sealed as {message.get('task')!r}, received as {task!r}")
    return message["items"]


def read_token(path: str) -> str:
    with open(path) as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"{path} is empty")
    return token
