"""Whether a query can be answered from an index: PostgreSQL's plans with the table's other indexes
out of the way (the tests that guard an index against a change to its query)."""

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext


def plans_of(read, only: str, *also: str) -> str:
    """PostgreSQL's plans for the statements `read()` runs, with table scans priced out and the other
    secondary indexes of `only`'s table dropped (but `also`): whether the filters can be answered
    from `only` (and `also`) at all. (On a test's few rows the planner would scan the tables anyway, and which index it prefers
    among several, or whether it reads one index-only, follows the statistics and the visibility
    map that earlier tests and VACUUM leave behind, none of which a test's transaction controls.)"""
    with CaptureQueriesContext(connection) as statements:
        read()
    # A savepoint rolled back undoes the setting and the dropped indexes.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "SELECT o.indexname FROM pg_indexes i JOIN pg_indexes o USING (schemaname, tablename)"
            " JOIN pg_index x ON x.indexrelid = o.indexname::regclass"
            " WHERE i.indexname = %s AND NOT o.indexname = ANY(%s) AND NOT x.indisunique", [only, [only, *also]])
        for (other,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{other}"')
        plans = []
        for statement in statements.captured_queries:
            cursor.execute(f"EXPLAIN {statement['sql']}")
            plans += [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)
    return "\n".join(plans)


def reads(plan: str, index: str) -> bool:
    """Whether the plan reads `index` (an index, index-only or bitmap scan)."""
    return f"using {index} " in plan or f"on {index} " in plan or plan.endswith(index)
