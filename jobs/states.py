"""The job state machine of docs/design.md: every status and every legal move between them.

    Creating ─► Queuing ─┐                      ┌─► Succeeded
       │        Bidding ─┴─► EnvPreparing ─► Running ─┼─► Failed
       │                          │           │       └─► Restarting ─► Queuing | Bidding | EnvPreparing
       └──────────► Stopped ◄── Stopping ◄────┴── (user stop, max running time)

Queuing and Bidding stop straight to Stopped (nothing runs yet); anything with pods goes through
Stopping while they terminate. Succeeded, Failed and Stopped are final.
"""

from django.db import models


class JobStatus(models.TextChoices):
    CREATING = "Creating"
    QUEUING = "Queuing"
    BIDDING = "Bidding"
    ENV_PREPARING = "EnvPreparing"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    STOPPING = "Stopping"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"


S = JobStatus
TRANSITIONS: dict[str, frozenset[str]] = {
    S.CREATING: frozenset({S.QUEUING, S.BIDDING, S.FAILED, S.STOPPED}),
    S.QUEUING: frozenset({S.ENV_PREPARING, S.FAILED, S.STOPPED}),
    S.BIDDING: frozenset({S.ENV_PREPARING, S.FAILED, S.STOPPED}),
    S.ENV_PREPARING: frozenset({S.RUNNING, S.RESTARTING, S.FAILED, S.STOPPING}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.RESTARTING, S.STOPPING}),
    S.RESTARTING: frozenset({S.QUEUING, S.BIDDING, S.ENV_PREPARING, S.FAILED, S.STOPPING}),
    S.STOPPING: frozenset({S.STOPPED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.STOPPED: frozenset(),
}

FINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
WAITING = frozenset({S.QUEUING, S.BIDDING})
ACTIVE = frozenset({S.ENV_PREPARING, S.RUNNING, S.RESTARTING, S.STOPPING})


class IllegalTransition(Exception):
    def __init__(self, current: str, target: str):
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none (final status)"
        super().__init__(f"a job in status {current} cannot become {target}; allowed: {allowed}")
        self.current, self.target = current, target


def check_transition(current: str, target: str) -> None:
    if target not in TRANSITIONS.get(current, ()):
        raise IllegalTransition(current, target)


class PodStatus(models.TextChoices):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


# A pod in these states on a node holds its capacity; only the agent's final report frees it.
LIVE_STATUSES = (PodStatus.PENDING, PodStatus.RUNNING, PodStatus.UNKNOWN)


class PodSubStatus(models.TextChoices):
    NORMAL = "Normal"
    EVICTED = "Evicted"  # shown as "Resource Preempted"
