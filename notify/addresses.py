"""Where a webhook may point. A URL is refused when its host resolves to a loopback, link-local
(cloud metadata at 169.254.169.254), unspecified, multicast or reserved address, or to one of this
server's own addresses or names (its host name, ALLOWED_HOSTS): a webhook must not let a workspace
admin make the server call itself or the node it runs on. Private networks (10/8, 192.168/16, ...)
are allowed, since receivers inside the cluster's network are the usual case on a self-hosted
platform. OPENDLC_WEBHOOK_ALLOW_PRIVATE, or a subscription's allow_private (set by staff), lifts the rule.

The check runs when a subscription is made and again at each delivery, and the delivery connects to
the very address it checked (notify/sender.py), so a name that resolves elsewhere later (DNS
rebinding) reaches nothing it should not.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

SCHEMES = ("http", "https")


class Refused(ValueError):
    """The URL may not be called; the message says why."""


def checked_addresses(url: str, *, allow_private: bool) -> tuple[str, int, list[str]]:
    """(host, port, addresses) of a URL that may be called, its addresses in resolver order.
    Raises Refused."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise Refused("must be an http:// or https:// URL with a host name")
    if parts.username or parts.password:
        raise Refused("must not carry a user name or password; the signature authenticates the server")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused("has a port that is not a number from 1 to 65535") from None
    host = parts.hostname
    addresses = resolve(host, port)
    if not addresses:
        raise Refused(f"host {host} does not resolve to any address")
    if not (allow_private or settings.OPENDLC_WEBHOOK_ALLOW_PRIVATE):
        _refuse_private(host, addresses)
    return host, port, addresses


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(info[4][0] for info in infos))


def _refuse_private(host: str, addresses: list[str]) -> None:
    if host.lower().rstrip(".") in _own_names():
        raise Refused(f"host {host} is this server (ALLOWED_HOSTS); an admin may allow it")
    own = _own_addresses()
    for text in addresses:
        address = ipaddress.ip_address(text.split("%")[0])
        address = getattr(address, "ipv4_mapped", None) or address
        kind = _forbidden_kind(address)
        if kind or str(address) in own:
            raise Refused(f"host {host} resolves to {address}, {kind or 'an address of this server'}; "
                          "webhooks may not call it unless an admin allows private addresses")


def _forbidden_kind(address) -> str | None:
    for kind, test in (("a loopback address", "is_loopback"), ("a link-local address", "is_link_local"),
                       ("the unspecified address", "is_unspecified"), ("a multicast address", "is_multicast"),
                       ("a reserved address", "is_reserved")):
        if getattr(address, test):
            return kind
    return None


def _own_names() -> set[str]:
    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    return names | {h.lower().strip("[]") for h in settings.ALLOWED_HOSTS if h and h != "*" and not h.startswith(".")}


def _own_addresses() -> set[str]:
    """The addresses this server's names resolve to (those that resolve)."""
    return {a.split("%")[0] for name in _own_names() for a in resolve(name, 0)}
