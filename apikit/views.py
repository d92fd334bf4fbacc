"""The base of every SDK endpoint: signature auth, JSON in and out, SDK-shaped errors, RequestId."""

from __future__ import annotations

from django.views.decorators.csrf import csrf_exempt
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from apikit.auth import Acs3Authentication
from apikit.errors import ApiError, json_error, sdk_exception_handler
from apikit.requestid import request_id


class AlwaysJson(BaseContentNegotiation):
    """The SDK asks for application/json; answer JSON whatever a hand-written client asks for."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class SdkView(APIView):
    authentication_classes = [Acs3Authentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [JSONParser]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = AlwaysJson

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
    return json_error(
        request, "InvalidAction.NotFound",
        f"{request.method} {request.path} is not an API action of this server.", 404,
    )
