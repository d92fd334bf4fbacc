"""The webhook signature, Stripe's scheme: `OpenDLC-Signature: t=<unix time>,v1=<hex>` where the hex
is HMAC-SHA256(secret, f"{t}.{body}"). The timestamp is signed with the body, so a receiver that
refuses old timestamps refuses a replayed request. docs/design.md has the receiver's check."""

import hashlib
import hmac
import secrets

HEADER = "OpenDLC-Signature"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, body: str, t: int) -> str:
    digest = hmac.new(secret.encode(), f"{t}.{body}".encode(), hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def verify(secret: str, body: str, header: str, *, now: int, tolerance_s: int = 300) -> bool:
    """What a receiver does (tests use it): the timestamp is recent and a v1 signature matches."""
    parts = [p.partition("=") for p in header.split(",")]
    t = next((v for k, _, v in parts if k == "t"), "")
    if not t.isdigit() or abs(now - int(t)) > tolerance_s:
        return False
    expected = signature(secret, body, int(t)).partition(",v1=")[2]
    return any(k == "v1" and hmac.compare_digest(v, expected) for k, _, v in parts)
