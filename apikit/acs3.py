"""Verify the ACS3-HMAC-SHA256 signature that the official Alibaba Cloud SDKs send.

Pure Python, no Django: the API layer hands in the pieces of an HTTP request and gets back
the access key id, or an `Acs3Error` that carries the SDK-style `Code` and HTTP status.

What the SDK signs (alibabacloud_tea_openapi 0.4.x, `Client.do_request` and
`Utils.get_authorization`; read from the installed code, see docs/api-map.md):

    CanonicalRequest = METHOD \n
                       pathname \n            # exactly as sent: path parameters are already
                                              # percent-encoded (quote(safe='') + '~' kept)
                       canonical query \n     # keys sorted, raw; values quote(v, safe='~');
                                              # 'k=v' joined by '&'; '' when there is no query
                       canonical headers \n   # 'name:value\\n' per header, lower-case names,
                                              # sorted, values stripped
                       signed headers \n      # the same names joined by ';'
                       x-acs-content-sha256   # hex sha256 of the body bytes (of b'' when empty)
    StringToSign     = 'ACS3-HMAC-SHA256\\n' + hex(sha256(CanonicalRequest))
    Signature        = hex(hmac_sha256(secret, StringToSign))
    Authorization    = 'ACS3-HMAC-SHA256 Credential=<ak>,SignedHeaders=<names>,Signature=<hex>'

The SDK signs *every* header it set before signing (host, accept, user-agent, content-type and
all x-acs-*), while the HTTP library adds content-length, connection and accept-encoding
afterwards; so the verifier trusts the `SignedHeaders` list, but insists that it covers `host`
and every `x-acs-*` header of the request (otherwise the date or nonce could be swapped).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Mapping, Protocol
from urllib.parse import quote

ALGORITHM = "ACS3-HMAC-SHA256"
MAX_CLOCK_SKEW = timedelta(minutes=15)
DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # Utils.get_timestamp(): UTC, second precision
REQUIRED_SIGNED = ("host", "x-acs-date", "x-acs-signature-nonce", "x-acs-content-sha256")
# A nonce is kept and compared whole, so its length is bounded (the SDK sends 32 hex digits).
NONCE = re.compile(r"[\x21-\x7e]{1,128}")

_AUTH_RE = re.compile(
    r"^(?P<alg>\S+)\s+Credential=(?P<ak>[^,\s]+)\s*,\s*SignedHeaders=(?P<signed>[^,\s]*)"
    r"\s*,\s*Signature=(?P<sig>[0-9a-fA-F]+)\s*$"
)


class Acs3Error(Exception):
    """A rejected request. `code`/`message` go into the error body, `status` is the HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class NonceStore(Protocol):
    def seen(self, nonce: str, at: datetime) -> bool:
        """Record `nonce` as used at `at`; return True when it had been used before."""


class MemoryNonceStore:
    """A process-local NonceStore (tests, embedded mode). Forgets nonces older than the window."""

    def __init__(self, keep: timedelta = 2 * MAX_CLOCK_SKEW):
        self.keep = keep
        self._used: dict[str, datetime] = {}

    def seen(self, nonce: str, at: datetime) -> bool:
        horizon = at - self.keep
        self._used = {n: t for n, t in self._used.items() if t >= horizon}
        if nonce in self._used:
            return True
        self._used[nonce] = at
        return False


@dataclass(frozen=True)
class Authorization:
    algorithm: str
    access_key_id: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str | None) -> Authorization:
    if not value:
        raise Acs3Error("MissingAuthorization", "The Authorization header is required.")
    m = _AUTH_RE.match(value.strip())
    if not m:
        raise Acs3Error(
            "IncompleteSignature",
            "Authorization must look like 'ACS3-HMAC-SHA256 Credential=<AccessKeyId>,"
            "SignedHeaders=<h1;h2>,Signature=<hex>'.",
        )
    if m["alg"] != ALGORITHM:
        raise Acs3Error(
            "IncompleteSignature",
            f"Signature algorithm {m['alg']!r} is not supported; use {ALGORITHM}.",
        )
    signed = tuple(h for h in m["signed"].lower().split(";") if h)
    return Authorization(m["alg"], m["ak"], signed, m["sig"].lower())


def canonical_path(decoded_path: str) -> str:
    """The SDK's pathname, rebuilt from a server's already-decoded path.

    Prefer the raw request path when the server has it. A '/' inside one path parameter
    cannot be recovered from a decoded path; our ids never contain one.
    """
    return quote(decoded_path, safe="/~", encoding="utf-8")


def canonical_query(query: Mapping[str, str | Iterable[str]]) -> str:
    """Sorted 'key=value' pairs; keys raw (as the SDK does), values RFC 3986 encoded.

    The SDK never repeats a key (it flattens lists to Key.1, Key.2); a repeated key here gives
    one pair per value, sorted by value.
    """
    pairs = []
    for key, value in query.items():
        values = [value] if isinstance(value, str) else list(value)
        pairs.extend((key, quote(v, safe="~", encoding="utf-8")) for v in values if v is not None)
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_headers(headers: Mapping[str, str], names: Iterable[str]) -> str:
    return "".join(f"{name}:{headers[name].strip()}\n" for name in sorted(names))


def string_to_sign(method, path, query, headers, signed_headers, content_sha256) -> str:
    """headers: lower-cased names. Mirrors alibabacloud_tea_openapi Utils.get_authorization."""
    canonical_request = "\n".join(
        [
            method.upper(),
            path or "/",
            canonical_query(query),
            canonical_headers(headers, signed_headers),
            ";".join(sorted(signed_headers)),
            content_sha256,
        ]
    )
    return f"{ALGORITHM}\n{hashlib.sha256(canonical_request.encode('utf-8')).hexdigest()}"


def sign(secret: str, to_sign: str) -> str:
    return hmac.new(secret.encode("utf-8"), to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def verify(
    *,
    method: str,
    path: str,
    query: Mapping[str, str | Iterable[str]],
    headers: Mapping[str, str],
    body: bytes,
    secret_for: Callable[[str], str | None],
    now: datetime,
    nonces: NonceStore,
    max_skew: timedelta = MAX_CLOCK_SKEW,
) -> str:
    """Return the access key id of a correctly signed request, or raise Acs3Error.

    `path` is the raw (percent-encoded) request path, without the query (Django: the raw URI
    if the server gives one, else `canonical_path(request.path)`); `query` the decoded query
    parameters (Django: `dict(request.GET.lists())` — `QueryDict.items()` keeps only the last
    value); `headers` any case; `now` an aware UTC datetime. The nonce is recorded only once the
    signature is proven, so a forged request cannot burn a real client's nonce.
    """
    lower = _lower_headers(headers)
    auth = parse_authorization(lower.get("authorization"))
    _check_date(lower.get("x-acs-date"), now, max_skew)
    _check_signed_header_set(auth.signed_headers, lower)
    secret = secret_for(auth.access_key_id)
    if secret is None:
        raise Acs3Error(
            "InvalidAccessKeyId.NotFound", "Specified access key is not found.", status=404
        )
    claimed_sha = lower["x-acs-content-sha256"].strip().lower()
    expected = sign(
        secret,
        string_to_sign(method, path, query, lower, auth.signed_headers, claimed_sha),
    )
    if not hmac.compare_digest(expected, auth.signature):
        raise Acs3Error(
            "SignatureDoesNotMatch", "Specified signature is not matched with our calculation."
        )
    # The signature vouches for the header, not for the bytes that arrived.
    if hashlib.sha256(body or b"").hexdigest() != claimed_sha:
        raise Acs3Error(
            "ContentSha256Mismatch",
            "x-acs-content-sha256 is not the SHA-256 of the request body.",
        )
    if nonces.seen(lower["x-acs-signature-nonce"], now):
        raise Acs3Error("SignatureNonceUsed", "Specified signature nonce was used already.")
    return auth.access_key_id


def _lower_headers(headers: Mapping[str, str | Iterable[str]]) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    for name, value in headers.items():
        values = [value] if isinstance(value, str) else list(value)
        out.setdefault(name.lower(), []).extend(v.strip() for v in values)
    # Same as the SDK: repeated headers become one value, sorted, joined by ','.
    return {name: ",".join(sorted(vs)) for name, vs in out.items()}


def _check_signed_header_set(signed: tuple[str, ...], headers: Mapping[str, str]) -> None:
    if "x-acs-signature-nonce" not in headers:
        raise Acs3Error("MissingSignatureNonce", "The x-acs-signature-nonce header is required.")
    if not NONCE.fullmatch(headers["x-acs-signature-nonce"]):
        raise Acs3Error("InvalidSignatureNonce", "x-acs-signature-nonce must be 1 to 128 printable ASCII characters "
                                                 "without spaces.")
    if "x-acs-content-sha256" not in headers:
        raise Acs3Error("IncompleteSignature", "The x-acs-content-sha256 header is required.")
    must = set(REQUIRED_SIGNED) | {h for h in headers if h.startswith("x-acs-")}
    unsigned = sorted(must - set(signed))
    if unsigned:
        raise Acs3Error("IncompleteSignature", f"SignedHeaders must include {', '.join(unsigned)}.")
    absent = sorted(h for h in signed if h not in headers)
    if absent:
        raise Acs3Error(
            "IncompleteSignature", f"Signed header(s) missing from the request: {', '.join(absent)}."
        )


def _check_date(value: str | None, now: datetime, max_skew: timedelta) -> None:
    if not value:
        raise Acs3Error("InvalidTimeStamp.Expired", "The x-acs-date header is required.")
    try:
        at = datetime.strptime(value.strip(), DATE_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        raise Acs3Error(
            "InvalidTimeStamp.Format",
            f"x-acs-date {value!r} is not in the format yyyy-MM-ddTHH:mm:ssZ (UTC).",
        ) from None
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    if abs(now - at) > max_skew:
        raise Acs3Error(
            "InvalidTimeStamp.Expired",
            f"Specified time stamp or date value is expired: x-acs-date {value} is more than "
            f"{int(max_skew.total_seconds() // 60)} minutes from the server time.",
        )
