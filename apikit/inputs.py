"""What any API request may carry, checked before an action reads it: a body of at most
DATA_UPLOAD_MAX_MEMORY_SIZE, JSON at most MAX_DEPTH deep, and text (path, query, JSON keys and
strings) without NUL bytes or unpaired surrogates.

Such text cannot be stored (PostgreSQL refuses a NUL in text; neither database encodes a lone
surrogate) and no PAI field allows it, so it is refused here for every action at once, naming the
field, rather than by each action or by the database with a 500.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from apikit.errors import ApiError, body_too_large, invalid

MAX_DEPTH = 32  # the SDK's deepest shape (JobSpecs[0].SpotSpec...) is a few levels


def text_problem(value: str) -> str | None:
    """Why a text cannot be stored, or None."""
    if "\x00" in value:
        return "must not contain NUL (\\x00) characters"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "must be valid Unicode text (it holds an unpaired surrogate)"
    return None


def check_request(request) -> None:
    """The body's announced size, the path and the query of a Django request; raises ApiError."""
    announced = request.META.get("CONTENT_LENGTH") or "0"
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is not None and (not (announced.isascii() and announced.isdigit()) or int(announced) > limit):
        raise body_too_large()
    if problem := text_problem(request.path):
        raise ApiError("InvalidParameter", f"The request path {problem}.")
    for name, values in request.GET.lists():
        if problem := text_problem(name):
            raise invalid(f"query key {name!r}", problem)
        for value in values:
            if problem := text_problem(value):
                raise invalid(name, problem)


def check_json(value: Any, at: str = "", depth: int = 0) -> None:
    """Every key and string of a parsed body, and its depth; the error names the field."""
    if depth > MAX_DEPTH:
        raise invalid(at or "body", f"is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        if problem := text_problem(value):
            raise invalid(at or "body", problem)
    elif isinstance(value, dict):
        for key, item in value.items():
            path = f"{at}.{key}" if at else key
            if problem := text_problem(key):
                raise invalid(f"{at or 'body'} key {key!r}", problem)
            check_json(item, path, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, f"{at}[{i}]", depth + 1)


class SdkJsonParser(JSONParser):
    """DRF's strict JSON parser, whose result also passes check_json."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # json's C parser gives up on very deep nesting this way
            raise invalid("body", f"is nested more than {MAX_DEPTH} levels deep") from None
        check_json(data)
        return data

