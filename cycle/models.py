from django.db import models


class SchedulerBeat(models.Model):
    """When a schedule cycle last finished (one row): the beat's watchdog reads it (cycle/watchdog.py)."""

    at = models.DateTimeField()
