"""The schedule cycle: one object per scheduler process, run by the schedule task.

A cycle takes five steps, marked where they happen in `ScheduleCycle.run`:

    1. Serialize: one cycle at a time (PostgreSQL advisory transaction lock; SQLite's IMMEDIATE
       transaction), then read everything inside that transaction.
    2. Snapshot: nodes, the quota tree, the pods holding capacity, the waiting jobs
       (cycle/waiting.py keeps them between cycles and reads only what changed), market prices.
    3. Plan: scheduler.plan(snapshot, now), pure.
    4. Apply, in the same transaction: preempt, then admit (cycle/apply.py).
    5. After commit: the stop and start messages to the agents (jobs/dispatch.py), then the
       waiting jobs' reasons and queue positions that changed, in a second transaction.

Cycles are asked for with jobs.cycle_requests.request_cycle(), which sends the task by name.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time

from django.db import transaction
from django.utils import timezone
from prometheus_client import Histogram

import scheduler
from cycle import snapshot
from cycle.apply import apply
from cycle.pacing import Contention
from cycle.waiting import WaitingJobs
from cycle.watchdog import Beat
from jobs import cycle_requests, dispatch
from jobs.cycle_lock import hold_cycle_lock

log = logging.getLogger(__name__)

# The task rests as long as its last cycle took, at most this long, times how short of CPU the
# machine's other processes were meanwhile (cycle/pacing.py): back-to-back cycles would take the
# CPU that the reports, submissions and database they wait on need, and requests made during the
# rest join one larger cycle.
PACE_MAX_S = 0.5
# While another cycle is already requested, a cycle leaves the waiting jobs' reasons to it, as
# long as they were written less than this long ago: writing them is a large share of a busy
# cycle, and they decide nothing. Nothing is lost: each write compares with what was last written.
REASONS_DEFER_MAX_S = 3.0
# What ScheduleCycle.last_steps and the cycle's log line time, in order.
STEPS = ("lock", "snapshot", "plan", "apply", "commit and send", "wait reasons")
CYCLE_SECONDS = Histogram("opendlc_schedule_cycle_duration_seconds", "Schedule cycles: each step of ScheduleCycle.run, "
                          "and the whole cycle as step total", ["step"],
                          buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
# Resolved once: a cycle may run many times a second, and labels() looks its child up each call.
_STEP_SECONDS = {step: CYCLE_SECONDS.labels(step) for step in ("total", *STEPS)}


class ScheduleCycle:
    """A scheduler process's cycles and what it keeps between them: the waiting jobs it read,
    and when its next cycle may start."""

    def __init__(self):
        self.waiting = WaitingJobs()
        self.contention = Contention()
        self.rest_until = 0.0
        self.last_steps: dict[str, float] = {}  # seconds each step of the last cycle took
        self.beat = Beat()  # tells beat's watchdog that this scheduler cycles

    def run_paced(self) -> scheduler.Decisions:
        """The schedule task: rest (requests meanwhile join this cycle), then one cycle. A cycle
        that admitted every job it planned of a queue with more behind them (cycle/waiting.py
        QUEUE_DEPTH) is followed by the next at once, without a rest: those may fit too."""
        cycle_requests.rest(self.rest_until - time.monotonic())
        cycle_requests.clear_request()  # before reading: a request from now on gets its own cycle
        started = time.monotonic()
        decisions = None
        try:
            decisions = self.run(defer_reasons=cycle_requests.cycle_requested)
            self.beat.cycled()
            return decisions
        finally:
            ended = time.monotonic()
            self.rest_until = ended + min(PACE_MAX_S, ended - started) * self.contention.since_last()
            if decisions is not None and self.waiting.window_admitted(decisions):
                self.rest_until = 0.0
                cycle_requests.request_cycle()

    def run(self, now=None, *, defer_reasons=None) -> scheduler.Decisions:
        """One schedule cycle, applied in one transaction; messages go to the agents after commit.

        defer_reasons: a test, called once the cycle committed, of whether another cycle follows
        soon (the schedule task passes cycle_requested). If one does and the waiting jobs' reasons
        were written less than REASONS_DEFER_MAX_S ago, this cycle leaves them to it.
        """
        t = [time.perf_counter()]
        with transaction.atomic():
            hold_cycle_lock()  # 1. one cycle at a time
            t.append(time.perf_counter())
            cluster = snapshot.cluster(self.waiting.read())  # 2. snapshot
            # The clock after the reads: every job read was submitted before the cycle's now, so no
            # pod is bound (bound_at = now) before its job was submitted, however long the lock took.
            now = now or timezone.now()
            cluster = dataclasses.replace(cluster, markets=snapshot.markets(now))
            t.append(time.perf_counter())
            decisions = scheduler.plan(cluster, now)  # 3. plan
            t.append(time.perf_counter())
            dispatch.send_on_commit(apply(decisions, now, self.waiting))  # 4. apply
            t.append(time.perf_counter())
        t.append(time.perf_counter())  # 5. the messages went out on commit; then the reasons
        deferred = (defer_reasons is not None and self.waiting.stored_within(now, REASONS_DEFER_MAX_S)
                    and defer_reasons())
        if not deferred:
            self.store_wait_reasons(decisions, now)
        t.append(time.perf_counter())
        self.last_steps = {"total": t[-1] - t[0], **dict(zip(STEPS, (b - a for a, b in itertools.pairwise(t))))}
        for step, seconds in self.last_steps.items():
            _STEP_SECONDS[step].observe(seconds)
        # INFO when it decided something, else DEBUG: beat's idle cycles every few seconds are noise.
        level = logging.INFO if decisions.admissions or decisions.preemptions else logging.DEBUG
        log.log(level, "cycle: %d waiting jobs planned, %d admitted, %d preempted in %.3f s (%s)",
                len(cluster.jobs), len(decisions.admissions), len(decisions.preemptions), self.last_steps["total"],
                ", ".join(f"{step} {self.last_steps[step]:.3f}" for step in STEPS))
        return decisions

    def build_snapshot(self, now) -> scheduler.Snapshot:
        """The snapshot a cycle at `now` would plan on (for tests and benchmarks)."""
        return dataclasses.replace(snapshot.cluster(self.waiting.read()), markets=snapshot.markets(now))

    def store_wait_reasons(self, decisions: scheduler.Decisions, now) -> None:
        """The waiting jobs' reasons and queue positions that changed, after the cycle's commit, so
        that the admitted pods' start messages do not wait on them. A transaction of their own
        under the cycle lock, as every cycle's writes are. They are what the console shows of a
        waiting job and decide nothing: if this step is lost, the next refresh writes them."""
        with transaction.atomic():
            hold_cycle_lock()
            self.waiting.store(decisions.waiting, now)
