"""SQL that only PostgreSQL runs, for migrations of what SQLite has no form of (triggers, GIN
indexes): the embedded default keeps working without them."""

from __future__ import annotations

from django.db import migrations


def run_on_postgresql(forward: str, backward: str) -> migrations.RunPython:
    """A migration operation that executes `forward` (and `backward` to reverse it) on PostgreSQL
    and does nothing on any other database."""

    def on_postgresql(sql: str):
        def run(apps, schema_editor):
            if schema_editor.connection.vendor == "postgresql":
                schema_editor.execute(sql)
        return run

    return migrations.RunPython(on_postgresql(forward), on_postgresql(backward))
