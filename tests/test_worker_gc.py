"""Every Celery worker and every web worker tunes CPython's cyclic garbage collector as it starts
(console/collector.py)."""

import gc
import runpy
from pathlib import Path

import pytest
from celery import signals

from console import celery, collector

GUNICORN_CONF = Path(__file__).resolve().parents[1] / "gunicorn.conf.py"


@pytest.fixture
def restored_gc():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def assert_tuned_by(start) -> None:
    assert gc.get_threshold() != collector.GC_THRESHOLDS  # the interpreter's defaults, before the start
    loaded = type("Loaded", (), {})()  # a tracked object that exists before the start
    assert gc.get_freeze_count() == 0 and any(o is loaded for o in gc.get_objects())
    start()
    assert gc.get_threshold() == collector.GC_THRESHOLDS
    assert gc.get_freeze_count() > 0
    assert not any(o is loaded for o in gc.get_objects())  # frozen: the collector no longer scans it


def test_worker_start_freezes_what_it_loaded_and_raises_the_thresholds(restored_gc):
    assert celery._tune_gc in [ref() for _, ref in signals.worker_init.receivers]  # runs as a worker starts
    assert_tuned_by(celery._tune_gc)


def test_a_web_worker_does_the_same_once_it_loaded_the_application(restored_gc):
    hooks = runpy.run_path(str(GUNICORN_CONF))
    assert_tuned_by(lambda: hooks["post_worker_init"](worker=None))
