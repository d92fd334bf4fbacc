"""Market prices over time and the bills they produce."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from jobs.models import Accessibility, Job
from quotas.models import ResourceSpec, Workspace


class StockStatus(models.TextChoices):
    WITH_STOCK = "WithStock"
    CLOSED_WITH_STOCK = "ClosedWithStock"
    WITHOUT_STOCK = "WithoutStock"


class PriceHistory(models.Model):
    """The spot market price of an instance type's public pool at one tick (per node-minute)."""

    spec = models.ForeignKey(ResourceSpec, on_delete=models.CASCADE, related_name="price_history")
    at = models.DateTimeField()
    price = models.DecimalField(max_digits=12, decimal_places=6)
    stock_status = models.CharField(max_length=16, choices=StockStatus.choices, default=StockStatus.WITH_STOCK)
    utilization = models.FloatField(default=0.0)
    # The price engine's state after this tick, so the next tick continues from the last row.
    # Empty on rows written by hand (tests, imports): then ratio = price / on-demand and the
    # smoothed utilization is the raw one.
    ratio = models.DecimalField(max_digits=8, decimal_places=6, null=True, blank=True)
    smoothed_utilization = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["spec", "at"]
        constraints = [models.UniqueConstraint(fields=["spec", "at"], name="one_price_per_tick")]
        indexes = [models.Index(fields=["spec", "-at"])]
        verbose_name_plural = "price history"


class PayType(models.TextChoices):
    SPOT = "spot"
    POSTPAID = "postpaid"


class DailyBill(models.Model):
    """What one job cost on one day on one instance type (tag acs:pai:dlc:payType)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="bills")
    spec = models.ForeignKey(ResourceSpec, on_delete=models.PROTECT, related_name="+")
    day = models.DateField()
    pay_type = models.CharField(max_length=16, choices=PayType.choices)
    minutes = models.PositiveIntegerField(default=0)
    amount = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    on_demand_amount = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    # Copies of the job's (fixed when it is created; DailyBill.of fills them), so that the Usage page
    # selects bills with the scope's rule (jobs.services.visible_to) without joining every job.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False)
    accessibility = models.CharField(max_length=16, choices=Accessibility.choices)

    class Meta:
        ordering = ["-day", "job"]
        constraints = [
            models.UniqueConstraint(fields=["job", "spec", "day", "pay_type"], name="one_bill_per_job_day")
        ]
        # The Usage page's spend: a range of days, read from the index alone.
        indexes = [models.Index(fields=["day"], include=["workspace", "user", "accessibility", "pay_type", "minutes",
                                                         "amount", "on_demand_amount"], name="bill_day_covering")]

    @staticmethod
    def copied(job: Job) -> dict:
        """The fields a bill copies from its job."""
        return {"workspace_id": job.workspace_id, "user_id": job.user_id, "accessibility": job.accessibility}

    @classmethod
    def of(cls, job: Job, **fields) -> DailyBill:
        """An unsaved bill of `job`, with the job's copied fields."""
        return cls(job=job, **cls.copied(job), **fields)

    @property
    def tags(self) -> dict[str, str]:
        return {"acs:pai:dlc:payType": self.pay_type}

    @property
    def savings(self):
        return self.on_demand_amount - self.amount
