"""Formatting shared by the console's templates: money, per-hour prices, durations, badges."""

import re
from collections.abc import Iterable
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

from django import template
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import mark_safe

from market import units

register = template.Library()


@register.filter
def per_hour(price_per_minute) -> str:
    """A stored per-minute price as the number per hour every page shows (market.units), for a cell
    whose column says "/h"; "–" when there is none."""
    if price_per_minute in (None, ""):
        return "–"
    return str(units.per_hour(Decimal(price_per_minute)))


@register.filter
def hourly(price_per_minute) -> str:
    """A stored per-minute price with its unit, "0.4950 /h", for prose and figures standing alone."""
    return units.hourly(None if price_per_minute in (None, "") else Decimal(price_per_minute))


@register.filter
def money(amount) -> str:
    if amount in (None, ""):
        return "0.00"
    return f"{Decimal(amount).quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,}"


@register.filter
def percent(ratio, places=0) -> str:
    if ratio in (None, ""):
        return "–"
    return f"{Decimal(ratio) * 100:.{int(places)}f}%"


@register.filter
def field_label(form, name) -> str:
    """The label of a form's field by name, for an error shown away from its input."""
    field = form.fields.get(name)
    return field.label if field is not None else name


@register.filter
def hms(value) -> str:
    """A timedelta (or seconds) as 1d 02:03:04 / 02:03:04."""
    if value in (None, ""):
        return "–"
    seconds = int(value.total_seconds() if isinstance(value, timedelta) else value)
    days, rest = divmod(max(seconds, 0), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{days}d " if days else "") + f"{h:02d}:{m:02d}:{s:02d}"


@register.filter
def slug(value) -> str:
    return str(value).lower().replace(" ", "-")


# How events and reasons name another job: "for job dlc…", "Preempted job dlc… to start" (a
# pod id starts with its job's id too, but is never written after "job ").
JOB_MENTION = re.compile(r"\bjob (dlc[0-9a-z]+)\b")


def mentioned_jobs(texts: Iterable[str]) -> set[str]:
    return {job_id for text in texts for job_id in JOB_MENTION.findall(text or "")}


@register.filter
def job_links(text, visible) -> str:
    """The text, escaped, with each job it names linked to that job's page where the viewer may see it."""
    def link(found):
        job_id = found.group(1)
        if job_id not in visible:
            return found.group(0)
        return f'job <a href="{reverse("console:job-detail", args=[job_id])}">{job_id}</a>'
    return mark_safe(JOB_MENTION.sub(link, escape(text or "")))  # escaped first; the ids are [0-9a-z]
