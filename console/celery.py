"""The Celery app: the scheduler, the market ticker and the node agents are its workers."""

import os
import sys

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from django.conf import settings  # noqa: E402
from django.db import close_old_connections  # noqa: E402

from console import collector  # noqa: E402
from console.config import ConfigError  # noqa: E402

try:
    settings.INSTALLED_APPS  # load settings now: a bad variable stops here in one line
except ConfigError as exc:
    sys.exit(f"opendlc: configuration error: {exc}")


app = Celery("opendlc")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def _tune_gc(**_kwargs) -> None:
    collector.tune()  # once the worker has loaded its code (console/collector.py)


# Database connections. Celery's Django fixup closes them before and after every task (since Celery
# 5.6, celery#9824), whatever CONN_MAX_AGE says: every report batch and every schedule cycle opened
# a new PostgreSQL connection (a new server process, its catalog caches cold, its prepared
# statements gone), a cost every report batch paid again. A worker keeps them instead as Django
# keeps a web request's: close_old_connections() before and after each task closes one past
# CONN_MAX_AGE (60 s, console/config.py), one left in a transaction or after an error it cannot use
# (CONN_HEALTH_CHECKS), and on SQLite (CONN_MAX_AGE 0) every one, as before. The fixup's own closing
# is turned off with CELERY_DB_REUSE_MAX (it closes every 2 x that many tasks; console/settings.py);
# a forked child still closes what it inherited.
@signals.task_prerun.connect
@signals.task_postrun.connect
def _close_old_connections(sender=None, **_kwargs) -> None:
    if not getattr(getattr(sender, "request", None), "is_eager", False):
        close_old_connections()


@signals.worker_init.connect
def _check_configuration(**_kwargs) -> None:
    from console.config import ConfigError, check_services

    try:
        check_services()
    except ConfigError as exc:
        sys.exit(f"opendlc: configuration error: {exc}")
