from decimal import Decimal

import pytest

from jobs import dispatch
from jobs.services import JobRequest, RoleRequest, create_job
from quotas.models import Quota, Workspace


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    """Console tests drive the scheduler themselves: nothing goes to Celery or the agents."""
    sent = []
    monkeypatch.setattr("jobs.cycle_requests._request_now", lambda: None)
    monkeypatch.setattr(dispatch, "send", lambda messages: sent.extend(messages))
    return sent


def client_for(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def alice_client(client, alice):
    return client_for(client, alice)


@pytest.fixture
def bob_client(client, bob):
    return client_for(client, bob)


@pytest.fixture
def charlie_client(client, charlie):
    return client_for(client, charlie)


def quota_job(user, name="train", *, quota="nlp-team", instance_type="ecs.gn6v-c8g1.16xlarge", pods=1,
              oversold="ForbiddenQuotaOverSold", workspace="ml-research", priority=1, resources=None):
    """A Resource Quota job of one Worker role: on `instance_type`, or with its pods' own `resources`."""
    q = Quota.objects.get(name=quota)
    role = RoleRequest(role="Worker", pod_count=pods, instance_type="" if resources else instance_type,
                       resources=resources, image="pytorch:2")
    return create_job(user, JobRequest(
        display_name=name, user_command="python train.py", workspace_id=Workspace.objects.get(name=workspace).pk,
        resource_type=q.resource_type, source="quota", quota_id=q.quota_id, oversold_type=oversold,
        priority=priority, roles=[role],
    ))


def spot_job(user, name="spot", *, discount="0.3", instance_type="ecs.g7.xlarge", resource_type="ECS", vpc=None):
    return create_job(user, JobRequest(
        display_name=name, user_command="python train.py", resource_type=resource_type, source="spot",
        workspace_id=Workspace.objects.get(name="ml-research").pk, user_vpc=vpc or {},
        roles=[RoleRequest(role="Worker", pod_count=1, instance_type=instance_type, image="pytorch:2",
                           spot_strategy="SpotWithPriceLimit", spot_discount_limit=Decimal(discount))],
    ))
