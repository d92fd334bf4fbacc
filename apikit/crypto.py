"""Encryption at rest for AccessKey secrets and agents' join tokens (Fernet, key derived from SECRET_KEY).

Set OPENDLC_ENCRYPTION_KEY to keep secrets readable across a SECRET_KEY rotation.
"""

import base64
import hashlib
import os
import secrets
import string

from cryptography.fernet import Fernet
from django.conf import settings

_ALPHANUM = string.ascii_letters + string.digits


def _fernet() -> Fernet:
    material = os.environ.get("OPENDLC_ENCRYPTION_KEY") or settings.SECRET_KEY
    key = hashlib.sha256(b"opendlc-accesskey:" + material.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(plain: str) -> str:
    return _fernet().encrypt(plain.encode()).decode()


def decrypt(token: str) -> str:
    return _fernet().decrypt(token.encode()).decode()


def new_key_pair() -> tuple[str, str]:
    key_id = "LTAI" + "".join(secrets.choice(_ALPHANUM) for _ in range(20))
    secret = "".join(secrets.choice(_ALPHANUM) for _ in range(30))
    return key_id, secret
