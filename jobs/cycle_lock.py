"""The lock that runs schedule cycles one at a time, and that anything which must not interleave
with a cycle (a node moving between quotas while a cycle binds pods to it) takes too."""

from django.db import connection

# Any constant works; it names the one lock ("odlc").
CYCLE_LOCK_KEY = 0x6F646C63


def hold_cycle_lock() -> None:
    """Wait for a running cycle, and keep the next one waiting, until this transaction ends."""
    if connection.vendor == "postgresql":
        # A second cycle waits here and only then reads its snapshot, so it sees every binding the
        # first one committed: no node is booked twice.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CYCLE_LOCK_KEY])
    # SQLite: every transaction that writes began IMMEDIATE (console/config.py) and took the
    # database's write lock at BEGIN, so writers already run one at a time.
