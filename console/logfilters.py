"""Filters for the services' logs."""

import logging


class NoTracebackForClientErrors(logging.Filter):
    """An ordinary 4xx (a member without the right, a page not there) stays one line: Django logs a
    PermissionDenied with its traceback, which reads like a crash to whoever watches the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if 400 <= (getattr(record, "status_code", None) or 0) < 500:
            record.exc_info = record.exc_text = None
        return True
