"""The base of every SDK endpoint: signature auth, JSON in and out, SDK-shaped errors, RequestId."""

from __future__ import annotations

import functools
import re
import time

from django.urls import URLResolver, get_resolver
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import Histogram
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from apikit.auth import Acs3Authentication
from apikit.errors import ApiError, json_error, not_found, sdk_exception_handler
from apikit.inputs import SdkJsonParser, check_request
from apikit.requestid import request_id


class AlwaysJson(BaseContentNegotiation):
    """The SDK asks for application/json; answer JSON whatever a hand-written client asks for."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


# By the SDK's action name, never the path: a path holds job and pod ids, which no label may.
REQUEST_SECONDS = Histogram("opendlc_api_request_duration_seconds", "SDK API requests by action, until the answer is built",
                            ["action"], buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))


class SdkView(APIView):
    authentication_classes = [Acs3Authentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [SdkJsonParser]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = AlwaysJson

    def initial(self, request, *args, **kwargs):
        # Before the signature: an oversized body is refused unread, and a NUL is no key's concern.
        check_request(request._request)
        super().initial(request, *args, **kwargs)

    def dispatch(self, request, *args, **kwargs):
        started = time.perf_counter()
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            REQUEST_SECONDS.labels(self.action_name(request.method)).observe(time.perf_counter() - started)

    def action_name(self, method: str) -> str:
        """The SDK action this method of the view serves (apikit.schema.sdk_action), else "other"."""
        return getattr(getattr(self, method.lower(), None), "sdk_action", "other")

    def get_exception_handler(self):
        return sdk_exception_handler

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        response["x-acs-request-id"] = request_id(request)
        return response

    @staticmethod
    def reply(request, body: dict, status: int = 200) -> Response:
        return Response({"RequestId": request_id(request), **body}, status=status)

    def body(self, request) -> dict:
        """The JSON body as a dict ({} when there is none)."""
        data = request.data
        if not isinstance(data, dict):
            raise ApiError("InvalidParameter", "The request body must be a JSON object.")
        return data


# Exempt like every SDK view (DRF's as_view exempts them): the SDK signs its requests and sends no
# CSRF token, so without this an unserved POST, PUT or DELETE got Django's HTML 403 page.
@csrf_exempt
def unknown_api_path(request, *args, **kwargs):
    named = _encoded_id(request)
    if named:
        error = not_found(*named)
        return json_error(request, error.code, error.message, error.status_code)
    return json_error(
        request, "InvalidAction.NotFound",
        f"{request.method} {request.path} is not an API action of this server.", 404,
    )


def _encoded_id(request) -> tuple[str, str] | None:
    """(entity, id) when the path is a served action whose id held a '/', else None.

    The SDK percent-encodes a '/' inside an id (`%2F`) and the server decodes it before routing,
    so the path has a segment too many for its action's route; no entity has such an id.
    """
    raw = request.META.get("RAW_URI") or request.META.get("REQUEST_URI")
    if raw and "%2f" not in raw.lower():  # a server that keeps the raw path tells for sure
        return None
    for pattern, view_class in _wide_routes():
        match = pattern.match(request.path_info.lstrip("/"))
        if match and hasattr(view_class, request.method.lower()):
            named = next(((k, v) for k, v in match.groupdict().items() if "/" in v), None)
            if named:
                return _entity(named[0]), named[1]
    return None


@functools.cache
def _wide_routes() -> list[tuple[re.Pattern, type]]:
    """Every SDK action's route with its one-segment parameters widened to take a '/', the longest
    first: `jobs/{JobId}/pods/{PodId}/logs` must be tried before `jobs/{JobId}` swallows it."""
    routes, resolvers = [], [get_resolver()]
    while resolvers:
        for entry in resolvers.pop().url_patterns:
            if isinstance(entry, URLResolver):
                resolvers.append(entry)
            elif isinstance(view := getattr(entry.callback, "view_class", None), type) and issubclass(view, SdkView):
                routes.append((re.compile(entry.pattern.regex.pattern.replace("[^/]+", ".+")), view))
    return sorted(routes, key=lambda route: -route[0].pattern.count("/"))


def _entity(parameter: str) -> str:
    """`job_id` -> `Job`, `instance_type` -> `InstanceType`: EntityNotExist's suffix."""
    return "".join(word.capitalize() for word in parameter.removesuffix("_id").split("_"))
