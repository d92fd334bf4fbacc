"""Trigram indexes for the case-insensitive searches of job names and ids (ListJobs' DisplayName,
the console's job search), which Django writes as UPPER(column) LIKE '%TEXT%': without them every
job of the time window is read to test its name. PostgreSQL only (pg_trgm, a trusted extension
since PostgreSQL 13); on SQLite the searches scan, as before."""

from django.db import migrations

from dbkit.postgres import run_on_postgresql

FORWARD = """
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX job_display_name_trgm ON jobs_job USING gin (UPPER(display_name::text) gin_trgm_ops);
CREATE INDEX job_job_id_trgm ON jobs_job USING gin (UPPER(job_id::text) gin_trgm_ops);
"""
BACKWARD = """
DROP INDEX job_display_name_trgm;
DROP INDEX job_job_id_trgm;
"""


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0017_usage_covering_indexes"),
    ]

    operations = [
        run_on_postgresql(FORWARD, BACKWARD),
    ]
