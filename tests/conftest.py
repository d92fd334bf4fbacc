import pytest
from django.contrib.auth import get_user_model

from console import demo
from cycle import tasks as cycle_tasks
from cycle.schedule import ScheduleCycle
from jobs import cycle_requests


@pytest.fixture(scope="session", autouse=True)
def live_server_requests_close_their_connections():
    """A live server's request thread keeps its database connection for CONN_MAX_AGE (60 s in
    console/config.py) and, while the SDK's HTTP client holds the socket open (keep-alive), the
    thread lives on: PostgreSQL then refused to drop the test database ("being accessed by other
    users"). With 0 a request's connection closes when the request ends."""
    from django.db import connections

    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = 0


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete():
    """A transactional test (live server, real workers) is followed by Django's flush of every
    table, on PostgreSQL one TRUNCATE of them all, which makes new files for each table and index:
    most of a small test's time. A test leaves a few rows, and DELETE removes them far sooner. The
    flush is one transaction and Django's foreign keys are checked at commit, so the tables' order
    does not matter; the delete trigger of jobs_job fires on TRUNCATE as on DELETE."""
    from django.db import connection

    if connection.vendor != "postgresql":
        yield  # SQLite's flush deletes already
        return
    operations = type(connection.ops)
    truncate = operations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:  # what only TRUNCATE does: Django's own flush
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"DELETE FROM {self.quote_name(table)};" for table in tables]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(operations, "sql_flush", sql_flush)
        yield


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """The demo seed hashes three or four passwords a test, and Django's default hasher is slow by
    design: seeding was most of many tests' time. No test is about the hasher."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_scheduler_memory(monkeypatch):
    """Each test starts with a scheduler process that has seen no cycle (cycle/waiting.py) nor read
    the quotas' typical runs (cycle/typical.py), and an empty cache (SQLite reuses the primary keys
    of rolled-back rows)."""
    from django.core.cache import cache

    from cycle import typical

    monkeypatch.setattr(cycle_tasks, "process_cycle", ScheduleCycle())
    typical.forget()
    cache.clear()


@pytest.fixture(autouse=True)
def no_remembered_agent_credentials():
    """jobs/agents.py keeps credentials a few seconds: a test's rolled-back ones must not outlive it."""
    from jobs.agents import forget_credentials

    yield
    forget_credentials()


@pytest.fixture(autouse=True)
def no_wake_ups(monkeypatch):
    """A pod that ends wakes a resting schedule task through Redis (jobs/cycle_requests.py
    _end_rest); no test's pod wakes a task, or leaves a wake-up behind for the next test's paced
    cycles."""
    monkeypatch.setattr(cycle_requests, "_end_rest", lambda: None)


@pytest.fixture
def demo_cluster(db):
    """The seeded demo (tenant, workspaces, quotas with nodes, public pool, alice/bob/charlie),
    without the week of price history: tests write the prices they assert on."""
    return demo.seed(price_history=False)


@pytest.fixture
def alice(demo_cluster):
    return get_user_model().objects.get(username="alice")


@pytest.fixture
def bob(demo_cluster):
    return get_user_model().objects.get(username="bob")


@pytest.fixture
def charlie(demo_cluster):
    return get_user_model().objects.get(username="charlie")


@pytest.fixture
def mallory(demo_cluster):
    """The owner of workspace red-team in a second tenant, acme, with her own quota red-quota and its
    two V100 nodes: nothing of hers may show in the demo tenant, nor anything of the demo in hers."""
    from quotas.models import Membership, Node, Quota, ResourceSpec, Role, Tenant, Workspace

    acme = Tenant.objects.create(name="acme")
    user = get_user_model().objects.create_user("mallory", "mallory@example.com", demo.DEMO_PASSWORD)
    red_team = Workspace.objects.create(tenant=acme, name="red-team")
    Membership.objects.create(workspace=red_team, user=user, role=Role.OWNER, is_default=True)
    quota = Quota.objects.create(quota_id="quotaacme0001", name="red-quota", tenant=acme)
    quota.workspaces.set([red_team])
    v100 = ResourceSpec.objects.get(instance_type="ecs.gn6v-c8g1.16xlarge")
    Node.objects.bulk_create(Node(name=f"red-quota-gn6v-{i}", spec=v100, quota=quota) for i in range(2))
    return user


@pytest.fixture
def bob_admin(bob):
    """bob as an admin (not staff) of ml-research in the demo tenant: he administers the quotas bound to
    it (ml-platform and below, llm-pretrain)."""
    from quotas.models import Membership, Role

    Membership.objects.filter(user=bob, workspace__name="ml-research").update(role=Role.ADMIN)
    return bob
