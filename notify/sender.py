"""Sending one webhook request or e-mail. Raises Transient for what is worth another attempt
(no connection, a timeout, 408, 429, 5xx, an SMTP error) and Permanent for what is not."""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import requests
from django.conf import settings
from django.core.mail import send_mail
from requests.adapters import HTTPAdapter

from notify import addresses, signing

TIMEOUT_S = (3.05, 10)  # connect, read
RETRY_CODES = frozenset({408, 425, 429, 500, 502, 503, 504})


class Transient(Exception):
    def __init__(self, error: str, code: int | None = None):
        super().__init__(error)
        self.code = code


class Permanent(Exception):
    def __init__(self, error: str, code: int | None = None):
        super().__init__(error)
        self.code = code


@dataclass(frozen=True)
class Sent:
    code: int | None


def post_webhook(url: str, secret: str, body: str, *, event: str, uid: str, allow_private: bool) -> Sent:
    try:
        host, _port, found = addresses.checked_addresses(url, allow_private=allow_private)
    except addresses.Refused as e:
        raise Permanent(f"URL refused: {e}") from None
    headers = {"Content-Type": "application/json", "User-Agent": "OpenDLC-Webhook/1",
               signing.HEADER: signing.signature(secret, body, int(time.time())),
               "OpenDLC-Event": event, "OpenDLC-Delivery": uid}
    try:
        response = _pinned_post(url, host, found[0], body.encode(), headers)
    except requests.RequestException as e:
        raise Transient(f"{type(e).__name__}: {e}"[:500]) from None
    if 200 <= response.status_code < 300:
        return Sent(response.status_code)
    error = f"HTTP {response.status_code}: {response.text[:200]}"
    if 300 <= response.status_code < 400:
        error = f"HTTP {response.status_code} redirect to {response.headers.get('Location', '?')} (not followed)"
    if response.status_code in RETRY_CODES:
        raise Transient(error, response.status_code)
    raise Permanent(error, response.status_code)


def _pinned_post(url: str, host: str, address: str, data: bytes, headers: dict) -> requests.Response:
    """POST to the address that was checked, not to whatever the name resolves to by now; TLS still
    checks the certificate against the host name, and the Host header names it."""
    parts = urlsplit(url)
    ip = f"[{address}]" if ipaddress.ip_address(address.split("%")[0]).version == 6 else address
    netloc = ip + (f":{parts.port}" if parts.port else "")
    with requests.Session() as session:
        session.trust_env = False  # a proxy from the environment would resolve the name itself
        session.mount(f"{parts.scheme}://", _PinnedHost(host))
        return session.post(urlunsplit(parts._replace(netloc=netloc)), data=data,
                            headers={**headers, "Host": parts.netloc.rpartition("@")[2]},
                            timeout=TIMEOUT_S, allow_redirects=False)


class _PinnedHost(HTTPAdapter):
    def __init__(self, host: str):
        self.host = host
        super().__init__(max_retries=0)  # Celery retries, with backoff

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, server_hostname=self.host, assert_hostname=self.host, **kwargs)


def send_email(address: str, subject: str, text: str) -> Sent:
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [address])
    except OSError as e:  # smtplib's errors are OSErrors; a refused connection too
        raise Transient(f"{type(e).__name__}: {e}"[:500]) from None
    return Sent(None)
