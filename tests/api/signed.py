"""Hand-made requests signed as the SDK signs them (apikit/acs3.py), for bodies, paths and queries
the SDK's own models would never send: NUL bytes, a raw JSON text, a wrong type."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone

import requests

from apikit import acs3


def signed(live_server, key: tuple[str, str], method: str, path: str, *, query: dict | None = None,
           body: bytes | str | dict | list | None = None, headers: dict | None = None) -> requests.Response:
    """Send `method path` to the live server signed by `key` (id, secret). `path` is decoded (a NUL
    may be in it); `body` a JSON-able value, or raw bytes / text sent as they are."""
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    raw = body.encode("utf-8") if isinstance(body, str) else (body or b"")
    raw_path = acs3.canonical_path(path)
    query = {k: str(v) for k, v in (query or {}).items()}
    sent = signed_headers(key, method, raw_path, query, raw, live_server.url.removeprefix("http://"), headers)
    target = raw_path + ("?" + acs3.canonical_query(query) if query else "")
    return requests.request(method, f"{live_server.url}{target}", data=raw, headers=sent, timeout=30)


def signed_headers(key: tuple[str, str], method: str, raw_path: str, query: dict[str, str], raw: bytes, host: str,
                   headers: dict | None = None) -> dict[str, str]:
    """The headers of a request signed by `key` as the SDK signs it, Authorization included."""
    sent = {
        "host": host, "x-acs-date": datetime.now(timezone.utc).strftime(acs3.DATE_FORMAT),
        "x-acs-signature-nonce": uuid.uuid4().hex, "x-acs-content-sha256": hashlib.sha256(raw).hexdigest(),
        "content-type": "application/json", **{k.lower(): v for k, v in (headers or {}).items()},
    }
    to_sign = acs3.string_to_sign(method, raw_path, query, sent, tuple(sent), sent["x-acs-content-sha256"])
    sent["authorization"] = (f"{acs3.ALGORITHM} Credential={key[0]},SignedHeaders={';'.join(sorted(sent))},"
                             f"Signature={acs3.sign(key[1], to_sign)}")
    return sent
