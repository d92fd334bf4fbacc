"""The Celery app: the scheduler, the market ticker and the node agents are its workers."""

import gc
import os
import sys

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from django.conf import settings  # noqa: E402

from console.config import ConfigError  # noqa: E402

try:
    settings.INSTALLED_APPS  # load settings now: a bad variable stops here in one line
except ConfigError as exc:
    sys.exit(f"opendlc: configuration error: {exc}")

# CPython's cyclic garbage collector, as every worker sets it at start (web processes keep the
# defaults). A schedule cycle with 10,000 waiting jobs builds hundreds of thousands of short-lived
# rows and tuples; with the default thresholds (700, 10, 10) they set off a collection of the
# young generations every few hundred objects and a full one every second or third cycle, 0.11-
# 0.19 s each: a sixth to a quarter of the mean cycle (bench/cycle_profile.py --kueue --python-gc
# against without). So what the worker loaded at start (Django, Celery, the modules) is frozen
# out of the collector's scans, and a collection waits for 50,000 new objects. Nearly all of them
# are freed by reference counting long before that; only garbage in reference cycles waits longer
# to be freed.
GC_THRESHOLDS = (50_000, 20, 10)

app = Celery("opendlc")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def _tune_gc(**_kwargs) -> None:
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@signals.worker_init.connect
def _check_configuration(**_kwargs) -> None:
    from console.config import ConfigError, check_services

    try:
        check_services()
    except ConfigError as exc:
        sys.exit(f"opendlc: configuration error: {exc}")
