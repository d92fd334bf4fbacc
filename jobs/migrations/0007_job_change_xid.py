"""PostgreSQL only: jobs_job.change_xid, the id of the transaction that last wrote the row (set by
a trigger), and jobs_job_deletes, a count of the statements that deleted jobs, so that a schedule
cycle reads only the waiting jobs changed since its last read (cycle/waiting.py). Neither is a
model: no code writes them. SQLite has no transaction ids; there a cycle reads every waiting
job's version."""

from django.db import migrations

from dbkit.postgres import run_on_postgresql

FORWARD = """
ALTER TABLE jobs_job ADD COLUMN change_xid bigint NOT NULL DEFAULT 0;
CREATE FUNCTION jobs_job_change_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END $$;
CREATE TRIGGER jobs_job_change_xid_insert BEFORE INSERT ON jobs_job
    FOR EACH ROW EXECUTE FUNCTION jobs_job_change_xid();
-- Only a write that moves what the cycle reads (the status, the version): a job's wait reason and
-- queue position, rewritten by every cycle, leave the column and so its index alone, and the
-- update stays HOT (no new entry in any of the table's indexes).
CREATE TRIGGER jobs_job_change_xid_update BEFORE UPDATE ON jobs_job
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.modified_at IS DISTINCT FROM NEW.modified_at)
    EXECUTE FUNCTION jobs_job_change_xid();
CREATE INDEX jobs_job_change_xid ON jobs_job (change_xid);
-- A delete leaves no row to find by its transaction id: the cycle reads every version again once
-- this count moved. Statement-level, so a delete of any number of jobs counts once.
CREATE TABLE jobs_job_deletes (id integer PRIMARY KEY, deletes bigint NOT NULL);
INSERT INTO jobs_job_deletes VALUES (1, 0);
CREATE FUNCTION jobs_job_count_deletes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs_job_deletes SET deletes = deletes + 1 WHERE id = 1;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_job_count_deletes AFTER DELETE OR TRUNCATE ON jobs_job
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_job_count_deletes();
"""

BACKWARD = """
DROP TRIGGER jobs_job_count_deletes ON jobs_job;
DROP FUNCTION jobs_job_count_deletes();
DROP TABLE jobs_job_deletes;
DROP TRIGGER jobs_job_change_xid_insert ON jobs_job;
DROP TRIGGER jobs_job_change_xid_update ON jobs_job;
DROP FUNCTION jobs_job_change_xid();
ALTER TABLE jobs_job DROP COLUMN change_xid;
"""


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0006_role_resources"),
    ]

    operations = [
        run_on_postgresql(FORWARD, BACKWARD),
    ]
