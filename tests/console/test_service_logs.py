"""The services' logs say what matters: no traceback for an ordinary 403, no kombu noise."""

import logging

import pytest
from django.conf import settings


def test_a_403_is_logged_as_one_line_without_a_traceback(bob_client, caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert bob_client.get("/quotas/new/").status_code == 403
    (record,) = [r for r in caplog.records if r.name == "django.request"]
    assert record.getMessage().startswith("Forbidden") and record.exc_info is None
    assert "Traceback" not in caplog.text


def test_a_500_keeps_its_traceback():
    from console.logfilters import NoTracebackForClientErrors

    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal Server Error", (),
                                   sys.exc_info())
    record.status_code = 500
    assert NoTracebackForClientErrors().filter(record) and record.exc_info is not None


@pytest.mark.skipif(bool(settings.REDIS_URL), reason="the embedded broker's URL")
def test_the_embedded_broker_connects_without_kombu_warning_of_a_missing_hostname(caplog):
    from console.celery import app

    with caplog.at_level(logging.WARNING, logger="kombu.connection"), app.connection_for_write() as connection:
        connection.info()
    assert "No hostname" not in caplog.text
