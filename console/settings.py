"""OpenDLC settings, all from the environment.

Embedded mode (the default): SQLite in WAL mode under var/, Celery on kombu's filesystem transport,
a SECRET_KEY generated on first run and kept in var/. Production: set DATABASE_URL (PostgreSQL),
REDIS_URL (broker and results) and SECRET_KEY.
"""

import os
import secrets
import socket
from pathlib import Path

from celery.schedules import crontab

from console.config import database_config, envbool, envint, is_agent, keep_private, load_secret_key, redis_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("OPENDLC_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# Prometheus metrics (console/metrics.py). Counters and histograms that any process observes (web,
# workers) live in files here, which /metrics adds up: prometheus_client's multiprocess mode, chosen
# when it is first imported, so this runs first. One folder per host, since containers that share
# the folder repeat process ids. The scrape-time gauges are read from the database instead.
OPENDLC_METRICS_DIR = VAR_DIR / "prometheus"
if not is_agent():
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(OPENDLC_METRICS_DIR / socket.gethostname())
    Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# The bearer token /metrics asks for; without one /metrics answers 404.
OPENDLC_METRICS_TOKEN = os.environ.get("OPENDLC_METRICS_TOKEN", "")

DEBUG = envbool("DEBUG", False)
EMBEDDED = not os.environ.get("DATABASE_URL")
# A node agent signs nothing with it and must not hold the platform's (manage.py starts it without).
SECRET_KEY = secrets.token_urlsafe(50) if is_agent() else load_secret_key(VAR_DIR, embedded=EMBEDDED)
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver").split(",")
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "drf_spectacular",
    "apikit",
    "console",
    "quotas",
    "datasets",
    "jobs",
    "spot",
    "cycle",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_config(VAR_DIR / "opendlc.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "console.staticfinders.PlotlyFinder",
]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
# Tests and `runserver` find static files without collectstatic.
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "OpenDLC API",
    "DESCRIPTION": "PAI-DLC (20201203) and PaiStudio (20220112) compatible API.",
    "VERSION": "0.1.0",
}

# Celery: Redis when REDIS_URL is set, otherwise kombu's filesystem transport (no server needed).
REDIS_URL = redis_url()
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND = REDIS_URL
else:
    BROKER_DIR = VAR_DIR / "broker"
    BROKER_DIR.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "console.broker:Transport"  # atomic writes (see console/broker.py)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR),
        "data_folder_out": str(BROKER_DIR),
        "store_processed": False,
        # Exchange tables too, or kombu writes them to ./control of whatever directory a process runs in.
        "control_folder": str(BROKER_DIR / "control"),
    }
    CELERY_RESULT_BACKEND = None
if EMBEDDED:
    keep_private(VAR_DIR / "opendlc.sqlite3", *([BROKER_DIR] if not REDIS_URL else []))
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup would close the database connections around every task; console/celery.py
# keeps them as Django does (CONN_MAX_AGE). The fixup closes them every 2 x this many tasks.
CELERY_DB_REUSE_MAX = 2**62
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_TASK_ROUTES = {
    "cycle.schedule": {"queue": "scheduler"},
    "jobs.tasks.enforce_max_running_time": {"queue": "scheduler"},
    "jobs.tasks.detect_hangs": {"queue": "scheduler"},
    "jobs.pod_reports": {"queue": "default"},
    "jobs.pod_progress": {"queue": "default"},
}

# Platform knobs.
OPENDLC_SCHEDULE_INTERVAL_S = envint("OPENDLC_SCHEDULE_INTERVAL_S", 5)
OPENDLC_MARKET_TICK_S = envint("OPENDLC_MARKET_TICK_S", 60)
OPENDLC_HEARTBEAT_INTERVAL_S = envint("OPENDLC_HEARTBEAT_INTERVAL_S", 10)
OPENDLC_NODE_LOST_AFTER_S = envint("OPENDLC_NODE_LOST_AFTER_S", 60)
# A signed agent message or sealed start message older than this is refused (a replay); long enough
# for reports that waited in the broker through a platform worker's restart.
OPENDLC_AGENT_REPLAY_WINDOW_S = envint("OPENDLC_AGENT_REPLAY_WINDOW_S", 600)
OPENDLC_POD_METRICS_RETENTION_S = envint("OPENDLC_POD_METRICS_RETENTION_S", 7 * 24 * 3600)
OPENDLC_POD_ROOT = Path(os.environ.get("OPENDLC_POD_ROOT", VAR_DIR / "pods"))
OPENDLC_BILLING_INTERVAL_S = envint("OPENDLC_BILLING_INTERVAL_S", 300)
OPENDLC_HANG_CHECK_INTERVAL_S = envint("OPENDLC_HANG_CHECK_INTERVAL_S", 60)
OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE = envint("OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE", 10_000)  # 0: no limit
OPENDLC_PRICE_REPLAY = os.environ.get("OPENDLC_PRICE_REPLAY", "")  # path:machine_type:region[:speed]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}


def _every(task: str, seconds: float, **options) -> dict:
    # Each entry expires before its next run: a busy worker drops stale ticks instead of
    # working through a backlog of them.
    return {"task": task, "schedule": float(seconds), "options": {"expires": float(seconds), **options}}


CELERY_BEAT_SCHEDULE = {
    "schedule-cycle": _every("cycle.schedule", OPENDLC_SCHEDULE_INTERVAL_S),
    "enforce-max-running-time": _every("jobs.tasks.enforce_max_running_time", 30),
    "nodes.reap_lost": _every("nodes.reap_lost", OPENDLC_HEARTBEAT_INTERVAL_S, queue="default"),
    # AIMaster hang detection (jobs/hang.py): intervals are 60 s or more, so a check a minute
    # finds a hang at most a minute late.
    "detect-hangs": _every("jobs.tasks.detect_hangs", OPENDLC_HANG_CHECK_INTERVAL_S),
    "spot-market-tick": _every("spot.tasks.market_tick", OPENDLC_MARKET_TICK_S),
    "spot-bill-today": _every("spot.tasks.bill_today", OPENDLC_BILLING_INTERVAL_S),
    "spot-close-yesterday": {
        "task": "spot.tasks.close_yesterday",
        "schedule": crontab(hour=0, minute=10),
        "options": {"expires": 3600},
    },
}
