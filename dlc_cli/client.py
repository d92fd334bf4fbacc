"""The official SDK clients built from the settings, and an SDK failure as one line of text."""

from __future__ import annotations

from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_paistudio20220112.client import Client as StudioClient
from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
from alibabacloud_tea_openapi.models import Config
from Tea.exceptions import TeaException

# What the CLI catches from a call: the API's refusals and the SDK's transport failures.
SDK_ERRORS = (AlibabaCloudException, TeaException)


def sdk_config(settings: dict) -> Config:
    """An endpoint written as a URL picks the protocol (OpenDLC often serves plain http); a bare
    host:port is reached over https, as the SDK does for PAI."""
    endpoint = settings["endpoint"]
    protocol = "https"
    for scheme in ("http", "https"):
        if endpoint.startswith(f"{scheme}://"):
            protocol, endpoint = scheme, endpoint.removeprefix(f"{scheme}://")
    return Config(access_key_id=settings["access_key_id"], access_key_secret=settings["access_key_secret"],
                  endpoint=endpoint.rstrip("/"), protocol=protocol, region_id=settings.get("region"))


def dlc(settings: dict) -> DLCClient:
    return DLCClient(sdk_config(settings))


def studio(settings: dict) -> StudioClient:
    return StudioClient(sdk_config(settings))


def describe(error: Exception) -> str:
    """`Code: Message` as the API sent them; for a transport failure, what the SDK said."""
    if isinstance(error, AlibabaCloudException):
        data = error.data if isinstance(error.data, dict) else {}
        message = data.get("Message") or data.get("message") or error.message or ""
        return f"{error.code}: {' '.join(str(message).split())}"
    return "cannot reach the endpoint: " + " ".join(str(error).split())
