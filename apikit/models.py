"""API access: AccessKey pairs (secret encrypted at rest) and the nonces already seen."""

from django.conf import settings
from django.db import models

from apikit import crypto


class AccessKeyStatus(models.TextChoices):
    ACTIVE = "Active"
    DISABLED = "Disabled"


class AccessKey(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_keys")
    access_key_id = models.CharField(max_length=64, unique=True)
    secret_encrypted = models.TextField()
    status = models.CharField(max_length=16, choices=AccessKeyStatus.choices, default=AccessKeyStatus.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.access_key_id

    @property
    def secret(self) -> str:
        return crypto.decrypt(self.secret_encrypted)

    @classmethod
    def issue(cls, user) -> tuple["AccessKey", str]:
        """Create a key pair; the plain secret is returned once and never stored."""
        key_id, secret = crypto.new_key_pair()
        key = cls.objects.create(user=user, access_key_id=key_id, secret_encrypted=crypto.encrypt(secret))
        return key, secret


class ApiNonce(models.Model):
    """x-acs-signature-nonce values seen recently; a reused one is a replay."""

    nonce = models.CharField(max_length=128, unique=True)
    seen_at = models.DateTimeField(db_index=True)
