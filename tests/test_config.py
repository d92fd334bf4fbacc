"""Bad configuration stops the process with one line naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_manage(tmp_path, *args, **env):
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")}
    clean.update(OPENDLC_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"DATABASE_URL": "postgres://nobody@127.0.0.1:1/nothing", "SECRET_KEY": "x"}, "DATABASE_URL: cannot connect"),
        ({"DATABASE_URL": "mysql://u@h/db", "SECRET_KEY": "x"}, "DATABASE_URL must be a postgres:// URL"),
        ({"REDIS_URL": "http://127.0.0.1:6379"}, "REDIS_URL must start with redis://"),
        ({"REDIS_URL": "redis://127.0.0.1:notaport/0"}, "REDIS_URL has an invalid port"),
        ({"REDIS_URL": "redis://127.0.0.1:1/0"}, "REDIS_URL: cannot connect"),
        ({"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/x"}, "SECRET_KEY is required"),
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
    ],
)
def test_bad_configuration_fails_in_one_line_naming_the_variable(tmp_path, env, needle):
    result = run_manage(tmp_path, "migrate", **env)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]


def test_embedded_mode_generates_and_keeps_a_secret_key(tmp_path):
    assert run_manage(tmp_path, "check").returncode == 0
    first = (tmp_path / "secret_key").read_text()
    assert run_manage(tmp_path, "check").returncode == 0
    assert (tmp_path / "secret_key").read_text() == first and len(first) >= 50


def test_embedded_sqlite_runs_in_wal_mode(db):
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        mode = cursor.fetchone()[0]
    assert mode == "wal"


def test_postgres_binds_parameters_on_the_server_and_prepares_a_repeated_statement(db):
    """A statement run twice on a connection is prepared there: parsed and planned once."""
    from django.db import connection

    from jobs.models import Job

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    for status in ("Queuing", "Running", "Queuing"):
        list(Job.objects.filter(status=status).values_list("pk"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    # one statement for the three, its value a parameter ($1), not inlined
    assert sum('FROM "jobs_job" WHERE "jobs_job"."status" = $1' in sql for sql in prepared) == 1, prepared


def test_a_node_agent_starts_without_reaching_the_database(db, monkeypatch):
    from django.db import connection

    from console.config import ConfigError, check_services

    def unreachable():
        raise RuntimeError("connection refused")

    with monkeypatch.context() as patch:  # undone before the db fixture's teardown connects
        patch.setattr(connection, "ensure_connection", unreachable)
        with pytest.raises(ConfigError, match="cannot connect"):
            check_services()
        patch.setenv("OPENDLC_PROCESS_ROLE", "agent")
        check_services()  # the broker alone is enough for an agent
