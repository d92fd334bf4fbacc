"""Bad configuration stops the process with one line naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KEY = "test-only-key-of-fifty-or-more-characters-0123456789"


def run_manage(tmp_path, *args, **env):
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")}
    clean.update(OPENDLC_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"DATABASE_URL": "postgres://nobody@127.0.0.1:1/nothing", "SECRET_KEY": KEY}, "DATABASE_URL: cannot connect"),
        ({"DATABASE_URL": "mysql://u@h/db", "SECRET_KEY": KEY}, "DATABASE_URL must be a postgres:// URL"),
        ({"SECRET_KEY": "short-but-set"}, "SECRET_KEY must be at least 50 characters with 5 different ones, got 13"),
        ({"SECRET_KEY": "a" * 60}, "SECRET_KEY must be at least 50 characters with 5 different ones, got 60"),
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


def test_a_node_agent_holds_neither_the_database_url_nor_the_secret_key(tmp_path):
    """A pod on the node must not find them in the agent (/proc/<agent>/environ): it starts again without."""
    from tests.agent.helpers import wait_for

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")}
    env.update(OPENDLC_VAR_DIR=str(tmp_path), SECRET_KEY="platform-secret-key-" * 3,
               DATABASE_URL="postgres://opendlc:db-password@127.0.0.1:5432/opendlc", OPENDLC_ENCRYPTION_KEY="k" * 44,
               OPENDLC_AGENT_TOKEN="its-join-token")  # the one secret it keeps
    agent = subprocess.Popen([sys.executable, "manage.py", "agent", "--simulated"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        environ = Path(f"/proc/{agent.pid}/environ")
        wait_for(lambda: b"OPENDLC_PROCESS_ROLE=agent" in environ.read_bytes() and agent.poll() is None, 30)
        held = environ.read_bytes()
        assert b"platform-secret-key" not in held and b"db-password" not in held and b"OPENDLC_ENCRYPTION_KEY" not in held
        assert agent.poll() is None  # it runs: an agent needs only the broker and its join token
        assert b"OPENDLC_AGENT_TOKEN=its-join-token" in held
    finally:
        os.killpg(agent.pid, 9)
        _, err = agent.communicate(timeout=30)
    assert "ignoring SECRET_KEY, DATABASE_URL, OPENDLC_ENCRYPTION_KEY" in err


def test_the_embedded_database_and_broker_are_readable_only_by_their_owner(tmp_path):
    from console.config import keep_private

    db, broker = tmp_path / "opendlc.sqlite3", tmp_path / "broker"
    broker.mkdir(mode=0o755)
    (tmp_path / "opendlc.sqlite3-wal").write_text("")
    keep_private(db, broker)
    assert db.stat().st_mode & 0o777 == 0o600 and (tmp_path / "opendlc.sqlite3-wal").stat().st_mode & 0o777 == 0o600
    assert broker.stat().st_mode & 0o777 == 0o700
