"""Reading and checking configuration from the environment.

Bad configuration must stop the process with one line that names the variable
(`ConfigError`), never with a traceback: manage.py, wsgi and the Celery app call `check()`.
"""

import os
import secrets
import socket
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url


MIN_SECRET_KEY_LENGTH = 50


class ConfigError(Exception):
    """A setting is missing or wrong; the message names the variable."""


def envbool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None


def load_secret_key(var_dir: Path, embedded: bool) -> str:
    """SECRET_KEY from the environment; in embedded mode generated once and kept in var/."""
    key = os.environ.get("SECRET_KEY")
    if key:
        # Django's own deployment check asks for 50 characters: a short key can be guessed offline
        # from any signed cookie.
        if len(key) < MIN_SECRET_KEY_LENGTH or len(set(key)) < 5:
            raise ConfigError(f"SECRET_KEY must be at least {MIN_SECRET_KEY_LENGTH} characters with 5 different ones, "
                              f"got {len(key)} (make one with: python -c 'import secrets; print(secrets.token_urlsafe(50))')")
        return key
    if not embedded:
        raise ConfigError("SECRET_KEY is required when DATABASE_URL is set (production mode)")
    path = var_dir / "secret_key"
    if not path.exists():
        # O_EXCL: two processes starting together must not write two different keys.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_text().strip()
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


def keep_private(*paths: Path) -> None:
    """Only this user may read the embedded database and broker: process pods run on this host."""
    for path in paths:
        try:
            if path.is_dir():
                path.chmod(0o700)
                continue
            if not path.exists():  # SQLite gives its -wal and -shm files the database's mode
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                if file.exists():
                    file.chmod(0o600)
        except PermissionError:
            pass  # another user's installation: not ours to change


def database_config(sqlite_path: Path) -> dict:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(sqlite_path),
            "OPTIONS": {
                # WAL lets the web, the worker and the agent read while one of them writes;
                # IMMEDIATE takes the write lock at BEGIN, so a transaction never fails to
                # upgrade its lock halfway through.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
            "TEST": {"NAME": str(sqlite_path.with_name("test_opendlc.sqlite3"))},
        }
    try:
        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    except Exception as exc:  # dj_database_url raises several types for a bad URL
        raise ConfigError(f"DATABASE_URL is malformed: {exc}") from None
    if config.get("ENGINE") != "django.db.backends.postgresql":
        raise ConfigError(f"DATABASE_URL must be a postgres:// URL, got scheme {urlsplit(url).scheme!r}")
    # Parameters bound by the server, and a statement run twice on a connection prepared there:
    # PostgreSQL then parses and plans each query text once per connection, where client-side
    # binding (Django's default) sent every value inlined, so that every statement was parsed
    # and planned afresh, its unnested arrays included, which cost PostgreSQL most of its CPU on
    # the submit and admit paths. Behind a PgBouncer in transaction mode, that needs PgBouncer
    # 1.21+ with max_prepared_statements set.
    config.setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=2)
    return config


def redis_url() -> str | None:
    url = os.environ.get("REDIS_URL")
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigError(f"REDIS_URL must start with redis:// or rediss://, got {url!r}")
    try:
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        raise ConfigError(f"REDIS_URL has an invalid port: {url!r}") from None
    if not parts.hostname:
        raise ConfigError(f"REDIS_URL has no host: {url!r}")
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise ConfigError(f"REDIS_URL database must be a number, got {db!r}")
    return url


def is_agent() -> bool:
    """Whether this process is a node agent (`manage.py agent`)."""
    return os.environ.get("OPENDLC_PROCESS_ROLE") == "agent"


def needs_database() -> bool:
    """A node agent talks only to the broker (docs/design.md): it starts where no database is."""
    return not is_agent()


def check_services() -> None:
    """Fail fast, in one line, when the configured database or Redis cannot be reached."""
    from django.conf import settings
    from django.db import connection

    try:
        if needs_database():
            connection.ensure_connection()
    except Exception as exc:
        where = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "the SQLite database"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{where}: cannot connect ({reason})") from None
    if settings.REDIS_URL:
        parts = urlsplit(settings.REDIS_URL)
        try:
            socket.create_connection((parts.hostname, parts.port or 6379), timeout=3).close()
        except OSError as exc:
            raise ConfigError(f"REDIS_URL: cannot connect to {parts.hostname}:{parts.port or 6379} ({exc.strerror or exc})") from None
