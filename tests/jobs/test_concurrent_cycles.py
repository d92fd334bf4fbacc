"""Two schedule cycles at once on PostgreSQL must never book a node twice.

The race that would double-book: cycle 1 reads its snapshot and gives both of nlp-team's nodes
to a two-pod gang; a priority-9 job arrives and cycle 2 reads a snapshot in which those bindings
are not yet committed, so it gives one node to the new job and backfills the other with a job
waiting behind the gang. To make the cycles overlap for certain, `plan` is wrapped: cycle 1, once
it has planned, waits (up to `wait_s`) for cycle 2 to have planned too, and cycle 2 applies only
after cycle 1 committed (so the two never deadlock on each other's job rows in the control). With
the cycle lock, cycle 2 cannot even read its snapshot before cycle 1 commits, so cycle 1's wait
runs out. The control test removes the lock and shows that the same scenario does double-book.
"""

import threading

import pytest
from django.db import connection, connections, transaction

import scheduler
from cycle import schedule
from cycle import tasks as cycle_tasks
from jobs.models import Pod
from jobs.services import create_job
from quotas.models import Node
from tests.jobs.conftest import make_request

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite serializes every writer anyway"),
]


def over_allocations() -> list[str]:
    """Every node whose pods hold more GPUs than it has, or share a GPU index."""
    problems = []
    for node in Node.objects.select_related("spec"):
        pods = Pod.objects.holding().filter(node=node)
        indices = [g for p in pods for g in p.gpu_indices]
        if sum(p.gpu for p in pods) > node.spec.gpu or len(indices) != len(set(indices)):
            problems.append(f"{node.name}: {sorted(indices)}")
    return problems


def race(bob, monkeypatch, wait_s: float) -> bool:
    """Run the two cycles; True when cycle 2 planned while cycle 1 had not committed yet."""
    create_job(bob, make_request(pods=2))  # the gang: both nodes
    create_job(bob, make_request(pods=1))  # waits behind it
    first_planned, second_planned, first_committed = threading.Event(), threading.Event(), threading.Event()
    overlapped = []
    real_plan = scheduler.plan

    def plan(snapshot, now):
        decisions = real_plan(snapshot, now)
        if threading.current_thread().name == "cycle-1":
            first_planned.set()
            overlapped.append(second_planned.wait(timeout=wait_s))
            # At its commit, not when its run returns: the run then writes the wait reasons under
            # the cycle lock, which cycle 2 holds while it waits for this.
            transaction.on_commit(first_committed.set)
        else:
            second_planned.set()
            first_committed.wait(timeout=60)
        return decisions

    monkeypatch.setattr(scheduler, "plan", plan)
    errors = []

    def first():
        run(cycle_tasks.process_cycle.run, errors)
        first_committed.set()  # also if it failed before its commit

    def second():
        first_planned.wait(timeout=60)
        run(lambda: create_job(bob, make_request(pods=1, priority=9)), errors)
        run(cycle_tasks.process_cycle.run, errors)

    threads = [threading.Thread(target=first, name="cycle-1"), threading.Thread(target=second, name="cycle-2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return overlapped == [True]


def run(fn, errors):
    try:
        fn()
    except Exception as exc:  # surfaced by the assertion in race()
        errors.append(repr(exc))
    finally:
        connections.close_all()  # this thread's connection


def test_two_cycles_at_once_never_book_a_node_twice(bob, monkeypatch):
    overlapped = race(bob, monkeypatch, wait_s=2)
    assert not overlapped, "the cycle lock should have kept the second cycle out until the first committed"
    assert over_allocations() == []
    assert Pod.objects.filter(node__isnull=False).count() == 2  # the gang took both nodes, once


def test_without_the_cycle_lock_the_same_race_double_books(bob, monkeypatch):
    """The control: proves the test above would catch a double booking."""
    monkeypatch.setattr(schedule, "hold_cycle_lock", lambda: None)
    overlapped = race(bob, monkeypatch, wait_s=30)
    assert overlapped
    assert over_allocations() != []
