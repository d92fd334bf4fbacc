"""Live-server fixtures: the official SDK clients pointed at our server with real AccessKeys."""

import pytest
from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_paistudio20220112.client import Client as StudioClient
from alibabacloud_tea_openapi.models import Config

from apikit.models import AccessKey
from quotas.models import Workspace


@pytest.fixture
def endpoint(live_server) -> str:
    return live_server.url.removeprefix("http://")


def config(endpoint: str, key_id: str, secret: str) -> Config:
    return Config(access_key_id=key_id, access_key_secret=secret, endpoint=endpoint, protocol="http")


def dlc_client(endpoint, key_id, secret) -> DLCClient:
    return DLCClient(config(endpoint, key_id, secret))


def studio_client(endpoint, key_id, secret) -> StudioClient:
    return StudioClient(config(endpoint, key_id, secret))


def key_of(user) -> tuple[str, str]:
    key, secret = AccessKey.issue(user)
    return key.access_key_id, secret


@pytest.fixture
def alice_key(alice):
    return key_of(alice)


@pytest.fixture
def alice_dlc(endpoint, alice_key):
    return dlc_client(endpoint, *alice_key)


@pytest.fixture
def alice_studio(endpoint, alice_key):
    return studio_client(endpoint, *alice_key)


@pytest.fixture
def bob_dlc(endpoint, bob):
    return dlc_client(endpoint, *key_of(bob))


@pytest.fixture
def bob_studio(endpoint, bob):
    return studio_client(endpoint, *key_of(bob))


@pytest.fixture
def research(demo_cluster):
    return Workspace.objects.get(name="ml-research")


@pytest.fixture
def vision(demo_cluster):
    return Workspace.objects.get(name="vision-lab")
