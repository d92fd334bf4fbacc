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
from csp.constants import NONE, SELF

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
    "axes",
    "apikit",
    "console",
    "quotas",
    "datasets",
    "jobs",
    "spot",
    "cycle",
    "notify",
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
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a lockout raised during authentication into its response.
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy: the console runs only its own static files. Its behaviours are wired by
# static/console/console.js from data- attributes (no inline script, handler or style attribute);
# Plotly and the bars style elements through the CSS object model, which the policy permits. Two
# hashes admit exactly Plotly's own <style> elements: the empty one it fills through the CSS object
# model, and its bundled map library's sheet (tests/console/test_csp.py fails if an upgrade changes it).
EMPTY_STYLE = "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
PLOTLY_MAP_STYLE = "'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o='"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF], "script-src": [SELF], "style-src": [SELF, EMPTY_STYLE, PLOTLY_MAP_STYLE], "img-src": [SELF, "data:"],
        "connect-src": [SELF], "font-src": [SELF], "object-src": [NONE], "base-uri": [SELF],
        "form-action": [SELF], "frame-ancestors": [NONE],
    },
}

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

# Login throttling (django-axes): after OPENDLC_LOGIN_FAILURE_LIMIT wrong passwords a username is
# locked out from every address, and an address for every username, for a cool-off that doubles
# with each further failure (console/lockout.py). The API's AccessKey signatures are not passwords
# and are not counted.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = envint("OPENDLC_LOGIN_FAILURE_LIMIT", 5)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each on its own, not the pair
# Axes counts the failures newer than this window before the last one: the lock lasts the backoff.
AXES_COOLOFF_TIME = "console.lockout.cool_off"
AXES_CLIENT_IP_CALLABLE = "console.lockout.client_ip"
AXES_LOCKOUT_TEMPLATE = "console/locked_out.html"
AXES_RESET_ON_SUCCESS = False  # one right guess must not wipe an attacker's record on another address
AXES_SENSITIVE_PARAMETERS = ["password"]
AXES_VERBOSE = False  # its start-up banner would break the one-line configuration errors; lockouts still log
OPENDLC_LOGIN_COOL_OFF_S = envint("OPENDLC_LOGIN_COOL_OFF_S", 60)
OPENDLC_LOGIN_COOL_OFF_MAX_S = envint("OPENDLC_LOGIN_COOL_OFF_MAX_S", 24 * 3600)

# HTTPS. OPENDLC_HTTPS=1 where browsers reach the console over TLS: redirects, HSTS and secure
# cookies (`manage.py check --deploy` is then clean). OPENDLC_BEHIND_TLS_PROXY=1 where a proxy ends
# TLS and says so in X-Forwarded-Proto (and gives the client's address in X-Forwarded-For).
OPENDLC_HTTPS = envbool("OPENDLC_HTTPS", False)
OPENDLC_BEHIND_TLS_PROXY = envbool("OPENDLC_BEHIND_TLS_PROXY", False)
if OPENDLC_BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if OPENDLC_HTTPS:
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]  # probes and Prometheus inside the cluster
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = envint("OPENDLC_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = envbool("OPENDLC_HSTS_PRELOAD", False)
# Preloading is a promise to the browsers' lists that cannot be taken back quickly: the operator's choice.
SILENCED_SYSTEM_CHECKS = ["security.W021"]

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
    # A message a worker took and did not acknowledge (it died) goes back to the queue after this
    # long, instead of kombu's hour; every task is idempotent, so a slow one run twice is harmless.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("OPENDLC_BROKER_VISIBILITY_TIMEOUT_S", 60)}
else:
    BROKER_DIR = VAR_DIR / "broker"
    BROKER_DIR.mkdir(parents=True, exist_ok=True)
    # The host is not used by this transport; naming one keeps kombu from warning that none was given.
    CELERY_BROKER_URL = "filesystem://localhost/"
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
# Acknowledge a message when its task is done, not when it starts: a worker killed mid-task loses
# nothing. Safe because every task is idempotent (reports and log chunks are deduplicated, a start
# of a known pod is ignored, a cycle plans from the database).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup would close the database connections around every task; console/celery.py
# keeps them as Django does (CONN_MAX_AGE). The fixup closes them every 2 x this many tasks.
CELERY_DB_REUSE_MAX = 2**62
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULER = "cycle.watchdog:WatchingScheduler"  # beat also watches that the scheduler cycles
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
# A bound pod no agent has reported started this long after its binding gets its start message again
# (jobs/dispatch.py resend_unstarted): the first may have been lost with a killed process.
OPENDLC_START_RESEND_AFTER_S = envint("OPENDLC_START_RESEND_AFTER_S", 30)
# A signed agent message or sealed start message older than this is refused (a replay); long enough
# for reports that waited in the broker through a platform worker's restart.
OPENDLC_AGENT_REPLAY_WINDOW_S = envint("OPENDLC_AGENT_REPLAY_WINDOW_S", 600)
OPENDLC_POD_METRICS_RETENTION_S = envint("OPENDLC_POD_METRICS_RETENTION_S", 7 * 24 * 3600)
OPENDLC_POD_ROOT = Path(os.environ.get("OPENDLC_POD_ROOT", VAR_DIR / "pods"))
OPENDLC_BILLING_INTERVAL_S = envint("OPENDLC_BILLING_INTERVAL_S", 300)
OPENDLC_HANG_CHECK_INTERVAL_S = envint("OPENDLC_HANG_CHECK_INTERVAL_S", 60)
OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE = envint("OPENDLC_MAX_WAITING_JOBS_PER_WORKSPACE", 10_000)  # 0: no limit
OPENDLC_PRICE_REPLAY = os.environ.get("OPENDLC_PRICE_REPLAY", "")  # path:machine_type:region[:speed]
# Notifications (notify/): webhooks may reach loopback, link-local and this server's addresses only
# with this on (or per subscription, set by staff); a delivery is tried at most this many times.
OPENDLC_WEBHOOK_ALLOW_PRIVATE = envbool("OPENDLC_WEBHOOK_ALLOW_PRIVATE", False)
OPENDLC_WEBHOOK_MAX_ATTEMPTS = envint("OPENDLC_WEBHOOK_MAX_ATTEMPTS", 8)
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "opendlc@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The handler's level too: records of loggers below the root (django.request's "Not Found")
    # reach it by propagation, which the root's own level does not filter.
    "handlers": {"console": {"class": "logging.StreamHandler", "level": os.environ.get("LOG_LEVEL", "INFO")}},
    "filters": {"no_traceback_for_4xx": {"()": "console.logfilters.NoTracebackForClientErrors"}},
    "loggers": {"django.request": {"filters": ["no_traceback_for_4xx"]}},
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
    "notify-redeliver": _every("notify.redeliver", 60),  # deliveries whose message was lost
    # The Usage page reads a finished pod from GpuDayUse once this rolled it up; until then from its row.
    "usage-roll-up": _every("jobs.tasks.roll_up_usage", 60, queue="default"),
    "spot-close-yesterday": {
        "task": "spot.tasks.close_yesterday",
        "schedule": crontab(hour=0, minute=10),
        "options": {"expires": 3600},
    },
}
