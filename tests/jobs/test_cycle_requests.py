import os
import time

import pytest
from django.db import transaction

from cycle import schedule
from cycle import tasks as cycle_tasks
from jobs import cycle_requests
from jobs.cycle_requests import clear_request, request_cycle

END_REST = cycle_requests._end_rest
MODES = ["file", pytest.param("redis", marks=pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs REDIS_URL"))]


@pytest.fixture(autouse=True)
def no_beat(monkeypatch):
    """These tests drive the schedule task without a database; the watchdog's record of a cycle needs one."""
    monkeypatch.setattr(cycle_tasks.process_cycle.beat, "cycled", lambda: None)


@pytest.fixture(params=MODES)
def flag(request, settings, tmp_path):
    if request.param == "file":
        settings.REDIS_URL, settings.VAR_DIR = None, tmp_path
    else:
        settings.REDIS_URL = os.environ["REDIS_URL"]
    clear_request()
    yield request.param
    clear_request()


def test_a_burst_of_requests_asks_for_one_cycle(flag):
    assert sum(cycle_requests._claim_request() for _ in range(50)) == 1


def test_a_request_after_the_cycle_started_asks_for_another(flag):
    assert cycle_requests._claim_request()
    clear_request()  # the schedule task starts
    assert cycle_requests._claim_request() and not cycle_requests._claim_request()


def test_a_cycle_knows_whether_another_was_requested_since_it_began(flag):
    clear_request()  # the schedule task starts
    assert not cycle_requests.cycle_requested()
    assert cycle_requests._claim_request()  # a submission meanwhile
    assert cycle_requests.cycle_requested()


def test_a_flag_whose_task_was_lost_expires(settings, tmp_path):
    settings.REDIS_URL, settings.VAR_DIR = None, tmp_path
    assert cycle_requests._claim_request()
    old = time.time() - cycle_requests.REQUEST_TTL_S - 1
    os.utime(tmp_path / "schedule-requested", (old, old))
    assert cycle_requests._claim_request()


def test_a_rolled_back_change_requests_no_cycle(db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            request_cycle()
            raise RuntimeError("rolled back")
    assert callbacks == []


def test_the_schedule_task_clears_the_request_and_runs_a_cycle(flag, monkeypatch):
    ran = []
    monkeypatch.setattr(cycle_tasks.process_cycle, "run", lambda **_: ran.append(1))
    assert cycle_requests._claim_request()
    cycle_tasks.schedule.apply()
    assert ran == [1] and cycle_requests._claim_request()


def test_the_schedule_task_rests_as_long_as_its_last_cycle_took_at_most_half_a_second(monkeypatch, settings):
    settings.REDIS_URL = None  # a plain sleep
    clock, slept = [100.0], []
    monkeypatch.setattr(cycle_tasks.process_cycle.contention, "since_last", lambda: 1.0)  # the machine is busy
    monkeypatch.setattr(schedule.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(schedule.time, "sleep", lambda s: (slept.append(round(s, 3)), clock.__setitem__(0, clock[0] + s)))
    monkeypatch.setattr(cycle_requests, "clear_request", lambda: None)
    monkeypatch.setattr(cycle_tasks.process_cycle, "rest_until", 0.0)

    def cycle_taking(seconds):
        monkeypatch.setattr(cycle_tasks.process_cycle, "run", lambda **_: clock.__setitem__(0, clock[0] + seconds))
        cycle_tasks.process_cycle.run_paced()

    cycle_taking(0.2)  # the first cycle does not wait
    cycle_taking(2.0)  # after a 0.2 s cycle: rests 0.2 s
    clock[0] += 0.1  # a request 0.1 s after a 2 s cycle: rests the 0.4 s left of 0.5
    cycle_taking(0.01)
    clock[0] += 1.0  # a request long after the last cycle: no rest
    cycle_taking(0.01)
    assert slept == [0.2, 0.4]  # no sleep at all for the first and the last


def test_on_a_machine_with_cpu_to_spare_the_schedule_task_rests_only_that_share(monkeypatch, settings):
    settings.REDIS_URL = None  # a plain sleep
    clock, slept, shares = [100.0], [], iter([0.25, 0.0, 1.0])
    monkeypatch.setattr(cycle_tasks.process_cycle.contention, "since_last", lambda: next(shares))
    monkeypatch.setattr(schedule.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(schedule.time, "sleep", lambda s: (slept.append(round(s, 3)), clock.__setitem__(0, clock[0] + s)))
    monkeypatch.setattr(cycle_requests, "clear_request", lambda: None)
    monkeypatch.setattr(cycle_tasks.process_cycle, "rest_until", 0.0)
    monkeypatch.setattr(cycle_tasks.process_cycle, "run", lambda **_: clock.__setitem__(0, clock[0] + 0.4))
    for _ in range(3):
        cycle_tasks.process_cycle.run_paced()
    assert slept == [0.1]  # others used a quarter of what they could have, then none


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs REDIS_URL")
def test_a_request_that_freed_capacity_cuts_the_rest_short_and_others_do_not(db, settings, monkeypatch,
                                                                            django_capture_on_commit_callbacks):
    settings.REDIS_URL = os.environ["REDIS_URL"]
    monkeypatch.setattr(cycle_requests, "_end_rest", END_REST)  # the real one (tests/conftest.py stubs it)

    def rest(seconds: float) -> float:
        began = time.monotonic()
        cycle_requests.rest(seconds)
        return time.monotonic() - began

    clear_request()
    with django_capture_on_commit_callbacks(execute=True):
        request_cycle(freed=True)  # a pod ended while the task rests (or before it began to)
    assert rest(30) < 5
    with django_capture_on_commit_callbacks(execute=True):
        request_cycle()  # a submission: it waits for the rest
    assert rest(0.3) >= 0.3
    with django_capture_on_commit_callbacks(execute=True):
        request_cycle(freed=True)
    clear_request()  # a cycle began after it: it sees that capacity already, and the next rest is whole
    assert rest(0.3) >= 0.3


def test_contention_is_the_share_of_the_cpu_the_other_processes_used():
    from cycle.pacing import Contention

    # (busy, total) CPU seconds of the machine, and this process's own, at each call.
    machine = iter([(10.0, 40.0), (11.0, 42.0), (13.0, 44.0), (14.5, 46.0), (15.0, 48.0)])
    own = iter([5.0, 6.0, 7.0, 7.5, 7.5])
    c = Contention(lambda: next(machine), lambda: next(own))
    assert c.since_last() == 1.0  # nothing to compare with yet: the full rest
    assert c.since_last() == 0.0  # the machine was busy 1 s of 2, all of it this process
    assert c.since_last() == 1.0  # others used the whole 1 s this process left them
    assert c.since_last() == 2 / 3  # 1 s of the 1.5 s left
    assert c.since_last() == 0.25


def test_contention_without_proc_stat_is_full():
    from cycle.pacing import Contention

    c = Contention(lambda: None, lambda: 0.0)
    assert c.since_last() == 1.0 and c.since_last() == 1.0
