"""Login throttling's two decisions that django-axes leaves to the project: how long a lockout
lasts (it doubles with every failure past the limit) and which address a request comes from."""

from datetime import timedelta

from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Q


def backoff(failures: int) -> timedelta:
    """The cool-off after `failures` wrong passwords in a row: the base at the limit, doubling after."""
    over = max(0, failures - settings.AXES_FAILURE_LIMIT)
    seconds = settings.OPENDLC_LOGIN_COOL_OFF_S * 2 ** min(over, 32)
    return timedelta(seconds=min(seconds, settings.OPENDLC_LOGIN_COOL_OFF_MAX_S))


def cool_off(request=None) -> timedelta:
    """AXES_COOLOFF_TIME: the backoff of the username or address with the most recorded failures."""
    if request is None:
        return backoff(0)
    username = request.POST.get(settings.AXES_USERNAME_FORM_FIELD) if request.method == "POST" else None
    address = getattr(request, "axes_ip_address", None) or client_ip(request)
    records = AccessAttempt.objects.filter(Q(ip_address=address) | Q(username=username) if username else
                                           Q(ip_address=address))
    return backoff(records.aggregate(most=Max("failures_since_start"))["most"] or 0)


def client_ip(request) -> str:
    """The client's address: the peer, or behind our TLS proxy the address the proxy appended last
    to X-Forwarded-For (earlier entries come from the client and can be forged)."""
    if settings.OPENDLC_BEHIND_TLS_PROXY:
        forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR", "")
