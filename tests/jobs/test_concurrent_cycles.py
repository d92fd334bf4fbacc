"""Two schedule cycles at once on PostgreSQL must never book a node twice.

The race that would double-book: cycle 1 reads its snapshot; a high-priority job arrives and
cycle 2 reads a snapshot in which cycle 1's bindings are not yet committed; each plans the same
nodes for different jobs. To make the two cycles overlap for certain, `plan` is wrapped: cycle 1
signals once it has read its snapshot, and each cycle waits at a barrier after planning, so that
if both could plan at the same time they would also apply at the same time. With the cycle lock
the second cycle cannot even read its snapshot until the first commits, so the barrier times out.
The control test removes the lock and shows the same scenario does double-book.
"""

import threading

import pytest
from django.db import connection, connections

from jobs import scheduling
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
        pods = Pod.objects.filter(node=node, status__in=("Pending", "Running", "Unknown"))
        indices = [g for p in pods for g in p.gpu_indices]
        if sum(p.gpu for p in pods) > node.spec.gpu or len(indices) != len(set(indices)):
            problems.append(f"{node.name}: {sorted(indices)}")
    return problems


def race(bob, monkeypatch) -> bool:
    """Run the two overlapping cycles; True when their plans overlapped in time."""
    for _ in range(3):  # more demand than nlp-team's two nodes
        create_job(bob, make_request(pods=1))
    snapshot_read, barrier = threading.Event(), threading.Barrier(2, timeout=2)
    real_plan = scheduling.s.plan

    def plan(snapshot, now):
        decisions = real_plan(snapshot, now)
        snapshot_read.set()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        return decisions

    monkeypatch.setattr(scheduling.s, "plan", plan)
    errors = []

    def first():
        run(scheduling.run_cycle, errors)

    def second():
        snapshot_read.wait(timeout=5)
        run(lambda: create_job(bob, make_request(pods=1, priority=9)), errors)
        run(scheduling.run_cycle, errors)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    return not barrier.broken


def run(fn, errors):
    try:
        fn()
    except Exception as exc:  # surfaced by the assertion in race()
        errors.append(repr(exc))
    finally:
        connections.close_all()  # this thread's connection


def test_two_cycles_at_once_never_book_a_node_twice(bob, monkeypatch):
    overlapped = race(bob, monkeypatch)
    assert not overlapped, "the cycle lock should have kept the second cycle out until the first committed"
    assert over_allocations() == []
    assert Pod.objects.filter(node__isnull=False).count() == 2  # both nodes used, each once


def test_without_the_cycle_lock_the_same_race_double_books(bob, monkeypatch):
    """The control: proves the test above would catch a double booking."""
    monkeypatch.setattr(scheduling, "_serialize_cycles", lambda: None)
    overlapped = race(bob, monkeypatch)
    assert overlapped
    assert over_allocations() != []
