"""The Celery app: the scheduler, the market ticker and the node agents are its workers."""

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

app = Celery("opendlc")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def _check_configuration(**_kwargs) -> None:
    from console.config import ConfigError, check_services

    try:
        check_services()
    except ConfigError as exc:
        sys.exit(f"opendlc: configuration error: {exc}")
