"""Errors in the shape the SDK reads: a JSON body with Code, Message and RequestId.

The SDK turns a status >= 400 into ClientException / TeaException (4xx) or ServerException (5xx)
carrying `code` and `message`, so every failure, including Django's own 404 and 500, leaves here
as JSON; an HTML page would make the SDK raise an unreadable JSONDecodeError instead.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf

from apikit.requestid import request_id

log = logging.getLogger(__name__)

INVALID_PARAMETER = "InvalidParameter"


class ApiError(drf.APIException):
    """A failure with the PAI error code and HTTP status the SDK will report."""

    def __init__(self, code: str, message: str, status: int = 400, errors: list[dict] | None = None):
        super().__init__(message)
        self.code, self.message, self.status_code = code, message, status
        self.errors = errors or []


def invalid(field: str, message: str) -> ApiError:
    """400 InvalidParameter naming the field: `JobSpecs[0].PodCount: must be at least 1, got 0`."""
    return ApiError(INVALID_PARAMETER, f"{field}: {message}", errors=[{"Field": field, "Message": message}])


def invalid_fields(errors: dict[str, str]) -> ApiError:
    """400 InvalidParameter for several fields at once, each named in the message."""
    message = "; ".join(f"{field}: {text}" for field, text in errors.items())
    return ApiError(
        INVALID_PARAMETER, message, errors=[{"Field": f, "Message": m} for f, m in errors.items()]
    )


def not_found(kind: str, ident: str) -> ApiError:
    # The same answer whether the entity does not exist or the caller may not see it.
    return ApiError(f"EntityNotExist.{kind}", f"{kind} {ident!r} does not exist.", status=404)


def forbidden(message: str) -> ApiError:
    return ApiError("NoPermission", message, status=403)


def body_too_large() -> ApiError:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return ApiError("RequestBodyTooLarge", f"The request body must be at most {limit} bytes ({limit / 2**20:g} MiB).",
                    413)


def error_body(request, code: str, message: str, errors: list[dict] | None = None) -> dict:
    body = {
        "RequestId": request_id(request),
        "HostId": request.META.get("HTTP_HOST", ""),
        "Code": code,
        "Message": message,
    }
    if errors:
        body["Errors"] = errors  # ignored by the SDK's model, kept in the exception's .data
    return body


def _translate(exc) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RequestDataTooBig):  # a body without Content-Length, read past the limit
        return body_too_large()
    if isinstance(exc, SuspiciousOperation):  # Django's own refusals of a request (too many fields, ...)
        return ApiError(INVALID_PARAMETER, str(exc))
    if isinstance(exc, Http404):
        return ApiError("EntityNotExist", str(exc) or "The requested resource does not exist.", 404)
    if isinstance(exc, (DjangoPermissionDenied, drf.PermissionDenied, drf.NotAuthenticated)):
        return forbidden(str(exc) or "You do not have permission to perform this action.")
    if isinstance(exc, drf.ParseError):
        return ApiError(INVALID_PARAMETER, f"The request body is not valid JSON: {exc.detail}")
    if isinstance(exc, drf.UnsupportedMediaType):
        return ApiError(INVALID_PARAMETER, f"{exc.detail} Send application/json.", 415)
    if isinstance(exc, drf.MethodNotAllowed):
        return ApiError("UnsupportedHTTPMethod", str(exc.detail), 405)
    if isinstance(exc, drf.APIException):
        return ApiError(exc.default_code, str(exc.detail), exc.status_code)
    return ApiError("InternalError", "The request processing has failed due to some unknown error.", 500)


def sdk_exception_handler(exc, context):
    """DRF's EXCEPTION_HANDLER for the API views: every exception becomes an SDK error body."""
    request = context["request"]
    error = _translate(exc)
    if error.status_code >= 500:
        log.exception("API request %s failed", request_id(request), exc_info=exc)
    response = JsonResponse(error_body(request, error.code, error.message, error.errors), status=error.status_code)
    response["x-acs-request-id"] = request_id(request)
    return response


def json_error(request, code: str, message: str, status: int) -> JsonResponse:
    """An SDK error body outside DRF (unknown API paths)."""
    response = JsonResponse(error_body(request, code, message), status=status)
    response["x-acs-request-id"] = request_id(request)
    return response
