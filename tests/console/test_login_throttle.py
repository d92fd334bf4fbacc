"""Login throttling (django-axes, console/lockout.py): wrong passwords lock the username from every
address and the address for every username, with a cool-off that doubles; it is logged."""

import logging
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client
from django.utils import timezone

from console.lockout import backoff

pytestmark = pytest.mark.django_db
PASSWORD = "opendlc-demo"


def log_in(username, password, address="10.0.0.1", **headers):
    client = Client(REMOTE_ADDR=address, **headers)
    return client.post("/login/", {"username": username, "password": password})


def fail(times, username="alice", address="10.0.0.1"):
    for _ in range(times):
        # The form again with its error, or the lockout page from the failure that reaches the limit.
        assert log_in(username, "wrong", address).status_code in (200, 429)


def test_the_right_password_logs_in(alice):
    assert log_in("alice", PASSWORD).status_code == 302


def test_five_wrong_passwords_lock_the_user_out_even_with_the_right_one(alice, caplog):
    caplog.set_level(logging.WARNING, logger="axes")
    fail(4)
    assert log_in("alice", PASSWORD).status_code == 302  # four are not yet a lockout
    assert log_in("alice", "wrong").status_code == 429  # the fifth is
    response = log_in("alice", PASSWORD)
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode() and "alice" in response.content.decode()
    assert any("Locking out" in r.getMessage() for r in caplog.records)


def test_the_username_is_locked_from_another_address_too(alice):
    for i in range(5):
        fail(1, address=f"10.0.1.{i}")  # an attacker spreading guesses over addresses
    assert log_in("alice", PASSWORD, address="10.9.9.9").status_code == 429


def test_the_address_is_locked_for_another_username_too(alice, bob):
    for name in ("alice", "bob", "carol", "dave", "eve"):
        fail(1, username=name)  # spraying one guess at many names
    assert log_in("bob", PASSWORD).status_code == 429
    assert log_in("bob", PASSWORD, address="10.0.0.2").status_code == 302  # bob elsewhere is fine


def age(seconds):
    """Let `seconds` pass since the last failure."""
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(seconds=seconds))


def test_the_lock_ends_after_its_cool_off(alice):
    fail(5)
    assert log_in("alice", PASSWORD, address="10.0.0.7").status_code == 429
    age(61)
    assert log_in("alice", PASSWORD, address="10.0.0.7").status_code == 302


def test_each_failure_past_the_limit_doubles_the_cool_off(settings):
    settings.OPENDLC_LOGIN_COOL_OFF_S = 60
    assert [backoff(n).total_seconds() for n in (1, 5, 6, 7, 8)] == [60, 60, 120, 240, 480]
    assert backoff(1_000).total_seconds() == settings.OPENDLC_LOGIN_COOL_OFF_MAX_S


def test_guessing_on_while_locked_out_keeps_the_lock_longer(alice):
    fail(7)  # two more while locked out: a cool-off of 4 minutes
    age(61)
    assert log_in("alice", PASSWORD, address="10.0.0.7").status_code == 429
    age(241)
    assert log_in("alice", PASSWORD, address="10.0.0.7").status_code == 302


def test_behind_the_proxy_the_address_is_the_one_the_proxy_appended(alice, settings):
    settings.OPENDLC_BEHIND_TLS_PROXY = True
    for i in range(5):  # the client forges the first entry each time; our proxy appends the real one
        log_in(f"user{i}", "wrong", address="127.0.0.1", HTTP_X_FORWARDED_FOR=f"1.2.3.{i}, 203.0.113.9")
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.9"}
    assert log_in("alice", PASSWORD, address="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 429


def test_signed_api_requests_are_not_counted_as_logins(alice):
    fail(3)
    Client(REMOTE_ADDR="10.0.0.1").get("/api/v1/jobs", {"WorkspaceId": "1"})  # unsigned: refused by the API
    assert AccessAttempt.objects.get().failures_since_start == 3
