"""A workspace's notification subscriptions (a webhook URL or an e-mail address, the job events it
wants) and the log of each delivery."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from apikit import crypto
from quotas.models import Workspace


class Event(models.TextChoices):
    """The job events a subscription may choose (notify/events.py says which transition is which)."""

    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    RESTARTED = "Restarted"
    SPOT_RELEASED = "SpotReleased"


TEST_EVENT = "Test"  # what "Send test event" delivers; no subscription chooses it


class Channel(models.TextChoices):
    WEBHOOK = "webhook", "Webhook"
    EMAIL = "email", "E-mail"


class Subscription(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="notification_subscriptions")
    channel = models.CharField(max_length=16, choices=Channel.choices, default=Channel.WEBHOOK)
    url = models.URLField(max_length=2048, blank=True)
    email = models.EmailField(blank=True)
    events = models.JSONField(default=list, help_text="The Event values chosen")
    # Fernet-encrypted (apikit.crypto) since signing needs the plain secret; shown once, at creation.
    secret_encrypted = models.TextField(blank=True)
    allow_private = models.BooleanField(default=False, help_text="May reach loopback, link-local or the "
                                        "server's own addresses (set by staff only)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.target

    @property
    def target(self) -> str:
        return self.url if self.channel == Channel.WEBHOOK else self.email

    @property
    def secret(self) -> str:
        return crypto.decrypt(self.secret_encrypted)


class DeliveryStatus(models.TextChoices):
    PENDING = "Pending"
    RETRYING = "Retrying"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Delivery(models.Model):
    """One event sent (or being sent) to one subscription; `body` is the JSON every attempt sends."""

    uid = models.CharField(max_length=32, unique=True, help_text="The body's id (OpenDLC-Delivery header)")
    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="deliveries",
                                     db_index=False)
    event = models.CharField(max_length=16)
    job_id = models.CharField(max_length=64, blank=True)
    body = models.TextField()
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now, help_text="When the next attempt is due")
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["subscription", "-created_at"]),
            # The reconcile task's scan: the few deliveries still under way among all ever sent.
            models.Index(fields=["next_attempt_at"], condition=models.Q(status__in=["Pending", "Retrying"]),
                         name="delivery_under_way"),
        ]

    def __str__(self) -> str:
        return f"{self.event} {self.job_id} -> {self.subscription_id}: {self.status}"
