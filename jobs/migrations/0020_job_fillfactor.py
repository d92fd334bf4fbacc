"""Room on each page of jobs_job for the updates that change no indexed column (a waiting job's
reason and position, every schedule cycle): PostgreSQL can then write the row's new version on the
same page without touching any of the table's indexes (a HOT update), where a full page makes it
insert into every index, the two trigram GIN indexes included. Pages written from now on keep a
fifth free. PostgreSQL only; SQLite has no such setting."""

from django.db import migrations

from dbkit.postgres import run_on_postgresql


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0019_usage_rollup"),
    ]

    operations = [
        run_on_postgresql("ALTER TABLE jobs_job SET (fillfactor = 80)", "ALTER TABLE jobs_job RESET (fillfactor)"),
    ]
