"""CPython's cyclic garbage collector, as every long-lived process of the platform sets it once its
code is loaded: the Celery workers (console/celery.py) and the web workers (gunicorn.conf.py).

A schedule cycle with thousands of waiting jobs, and a page of 50 jobs built as models (a job and
its pods refer to each other: a cycle only the collector frees), make many short-lived container
objects; with the default thresholds (700, 10, 10) they set off frequent collections, and each full
one scans every object the process loaded: pauses that stop every thread of a web worker at once
(docs/performance.md). So what the process loaded is frozen out of the collector's scans, and a
collection waits for 10,000 new objects. Nearly all of them are freed by reference counting long
before that; only garbage in reference cycles waits longer to be freed. Not many more: the
youngest generation is scanned whole at each collection, and a larger one (a few pages of jobs
and pods in cycles) made each scan a pause of its own that every thread of the worker waits out.
"""

import gc

GC_THRESHOLDS = (10_000, 10, 10)


def tune() -> None:
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
