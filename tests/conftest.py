import pytest
from django.contrib.auth import get_user_model

from console import demo


@pytest.fixture(autouse=True)
def fresh_scheduler_memory():
    """Each test starts with a scheduler process that has seen no cycle (jobs/waiting.py)."""
    from jobs import scheduling

    scheduling.waiting_jobs.clear()


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
