"""The platform's side of agent credentials (the wire format is agent/auth.py's).

An admin registers a node by name (`manage.py register_node NAME [--quota Q]`, or `--simulated`
for the simulated agent) and hands the printed join token to its agent. Then:

- every message from an agent is verified before anything is applied (`opened`): an unknown
  agent, a bad signature or a message outside OPENDLC_AGENT_REPLAY_WINDOW_S is refused and logged;
- a report about a pod is kept only if the pod is bound to the sender's node (`own_pods`; the
  simulated agent owns the pods of simulated nodes);
- a message to an agent is sealed with its node's key (`seal_for`), so no other node reads it.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from agent import auth
from agent.auth import SIMULATED, Refused
from apikit import crypto
from jobs.models import Pod
from quotas.models import AgentCredential, Executor, Node, Quota

log = logging.getLogger(__name__)


class NotRegistrable(ValueError):
    pass


def register(name: str, quota: Quota | None = None) -> str:
    """Issue a node's join token (replacing any earlier one, which stops working); returns it once."""
    if not name or "/" in name or name.startswith("."):
        raise NotRegistrable(f"node name {name!r}: give a host-like name (no '/', not starting with '.')")
    if name == SIMULATED and quota is not None:
        raise NotRegistrable("the simulated agent serves simulated nodes of every quota; it takes no --quota")
    token = secrets.token_urlsafe(32)
    with transaction.atomic():
        AgentCredential.objects.update_or_create(
            name=name, defaults={"quota": quota, "token_encrypted": crypto.encrypt(token)})
    forget_credentials()
    log.info("agent credential issued for %s", name)
    return token


def write_token_file(path, token: str) -> None:
    """Write a join token readable by its owner only (created 0600, never briefly wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file that existed keeps its mode otherwise
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")


@dataclass(frozen=True)
class Sender:
    """A verified agent: a node's, or the simulated agent (name "simulated")."""

    name: str
    quota_id: int | None = None  # the quota its node joins at its first heartbeat

    @property
    def simulated(self) -> bool:
        return self.name == SIMULATED

    def nodes(self):
        """The nodes whose pods this agent runs: every simulated node for the simulated agent."""
        if self.simulated:
            return Node.objects.filter(executor=Executor.SIMULATED)
        return Node.objects.filter(name=self.name)


def opened(task: str, envelope, now: float | None = None):
    """(sender, body) of a verified envelope; (None, None) when it is refused, which is logged."""
    try:
        name = auth.claimed_agent(envelope)
        credential = _credential(name)
        if credential is None:
            raise Refused(f"no agent {name!r} is registered (manage.py register_node {name})")
        body = auth.verify(credential.token, task, envelope, settings.OPENDLC_AGENT_REPLAY_WINDOW_S, now)
    except Refused as exc:
        claimed = envelope.get("agent") if isinstance(envelope, dict) else None
        log.warning("refused %s claiming to be from agent %r: %s", task, claimed, exc)
        return None, None
    return Sender(name, credential.quota_id), body


def own_pods(sender: Sender, task: str, items: list) -> list:
    """The items about pods bound to the sender's node(s); the others are refused and logged."""
    if not isinstance(items, list):
        return []
    ids = {item.get("pod_id") for item in items if isinstance(item, dict)}
    # The sender's nodes first, then the pods by id: as one join PostgreSQL could plan it from the
    # nodes and read every pod ever bound to them.
    theirs = set(sender.nodes().values_list("pk", flat=True))
    owned = {pod_id for pod_id, node in Pod.objects.filter(pod_id__in=ids).values_list("pod_id", "node_id")
             if node in theirs}
    kept = [item for item in items if isinstance(item, dict) and item.get("pod_id") in owned]
    if len(kept) < len(items):
        refused = sorted({str(i.get("pod_id")) for i in items if isinstance(i, dict)} - owned)[:5]
        log.warning("refused %d %s items from agent %s about pods not bound to it (%s)", len(items) - len(kept),
                    task, sender.name, ", ".join(refused))
    return kept


def agent_of_queue(queue: str) -> str:
    return queue.removeprefix("agent.")


def seal_for(queue: str, task: str, items: list) -> str | None:
    """The message sealed for the agent of `queue`; None (logged) when that node has no credential."""
    name = queue.removeprefix("agent.")
    credential = _credential(name)
    if credential is None:
        log.error("not sending %s for %d pods to %s: it has no credential (manage.py register_node %s)",
                  task, len(items), queue, name)
        return None
    return auth.seal(credential.token, task, items)


@dataclass(frozen=True)
class _Credential:
    token: str
    quota_id: int | None


# Every report batch and every message to an agent needs its token: each process keeps the
# decrypted credentials briefly, so a token reissued elsewhere takes effect within this many seconds.
_TTL_S = 5.0
_credentials: dict[str, tuple[float, _Credential | None]] = {}


def _credential(name: str) -> _Credential | None:
    now = time.monotonic()
    cached = _credentials.get(name)
    if cached is not None and now - cached[0] < _TTL_S:
        return cached[1]
    row = AgentCredential.objects.filter(name=name).values_list("token_encrypted", "quota_id").first()
    credential = _Credential(crypto.decrypt(row[0]), row[1]) if row else None
    _credentials[name] = (now, credential)
    return credential


def forget_credentials() -> None:
    """Drop what this process remembers (after a credential changed here; between tests)."""
    _credentials.clear()
