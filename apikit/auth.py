"""DRF authentication by the SDK's ACS3-HMAC-SHA256 signature (see apikit/acs3.py).

Every API request must be signed by an Active AccessKey; the verified key's user becomes
`request.user` and the key `request.auth`. Nonces are kept in the database (ApiNonce) so that a
replay is caught whichever server process receives it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication

from apikit import acs3
from apikit.errors import ApiError
from apikit.models import AccessKey, AccessKeyStatus, ApiNonce

# A request is accepted while its x-acs-date is within 15 minutes of the server clock, so one
# nonce can arrive twice at most 30 minutes apart: keeping 30 minutes of nonces catches every replay.
NONCE_KEEP = 2 * acs3.MAX_CLOCK_SKEW
PRUNE_EVERY_S = 60
LAST_USED_EVERY = timedelta(minutes=1)


_INSERT_NONCE = (f'INSERT INTO "{ApiNonce._meta.db_table}" (nonce, seen_at) VALUES (%s, %s) '
                 "ON CONFLICT (nonce) DO NOTHING")


class DbNonceStore:
    """acs3.NonceStore on ApiNonce; the unique index decides, so two processes cannot both accept."""

    _last_prune = 0.0  # per process: pruning on every request would be one DELETE too many

    def seen(self, nonce: str, at: datetime) -> bool:
        self._prune(at)
        # One statement and no transaction of its own (an INSERT that fails on the index needs
        # BEGIN and COMMIT or a savepoint around it): a nonce already there inserts no row.
        with connection.cursor() as cursor:
            cursor.execute(_INSERT_NONCE, [nonce, connection.ops.adapt_datetimefield_value(at)])  # acs3 bounds it
            return cursor.rowcount == 0

    @classmethod
    def _prune(cls, at: datetime) -> None:
        if time.monotonic() - cls._last_prune < PRUNE_EVERY_S:
            return
        cls._last_prune = time.monotonic()
        ApiNonce.objects.filter(seen_at__lt=at - NONCE_KEEP).delete()


def signed_path(request) -> str:
    """The path as the SDK signed it: gunicorn's raw URI when there is one, else re-encoded."""
    raw = request.META.get("RAW_URI") or request.META.get("REQUEST_URI")
    if raw and raw.startswith("/"):
        return raw.split("?", 1)[0]
    return acs3.canonical_path(request.path)


class Acs3Authentication(BaseAuthentication):
    def authenticate(self, request):
        http = request._request
        keys: dict[str, AccessKey] = {}
        now = timezone.now()
        try:
            acs3.verify(
                method=http.method,
                path=signed_path(http),
                query=dict(http.GET.lists()),
                headers=http.headers,
                body=http.body,
                secret_for=lambda key_id: _secret_for(key_id, keys),
                now=now,
                nonces=DbNonceStore(),
            )
        except acs3.Acs3Error as e:
            raise ApiError(e.code, e.message, e.status) from None
        key = next(iter(keys.values()))
        # A busy key writes last_used_at at most once a minute: not at all while the row just read says
        # it did, and then by a conditional update, which one of several processes wins.
        recently = now - LAST_USED_EVERY
        if key.last_used_at is None or key.last_used_at <= recently:
            AccessKey.objects.filter(pk=key.pk).exclude(last_used_at__gt=recently).update(last_used_at=now)
        return key.user, key

    def authenticate_header(self, request):
        return "ACS3-HMAC-SHA256"


def _secret_for(key_id: str, found: dict) -> str | None:
    key = AccessKey.objects.select_related("user").filter(access_key_id=key_id).first()
    if key is None:
        return None
    if key.status != AccessKeyStatus.ACTIVE or not key.user.is_active:
        raise acs3.Acs3Error("InvalidAccessKeyId.Inactive", "Specified access key is disabled.", status=403)
    found[key_id] = key
    return key.secret
