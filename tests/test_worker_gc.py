"""Every Celery worker tunes CPython's cyclic garbage collector as it starts (console/celery.py)."""

import gc

import pytest
from celery import signals

from console import celery


@pytest.fixture
def restored_gc():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_worker_start_freezes_what_it_loaded_and_raises_the_thresholds(restored_gc):
    assert celery._tune_gc in [ref() for _, ref in signals.worker_init.receivers]  # runs as a worker starts
    assert gc.get_threshold() != celery.GC_THRESHOLDS  # the interpreter's defaults, as a web process keeps
    loaded = type("Loaded", (), {})()  # a tracked object that exists before the start
    assert gc.get_freeze_count() == 0 and any(o is loaded for o in gc.get_objects())
    celery._tune_gc()
    assert gc.get_threshold() == celery.GC_THRESHOLDS
    assert gc.get_freeze_count() > 0
    assert not any(o is loaded for o in gc.get_objects())  # frozen: the collector no longer scans it
