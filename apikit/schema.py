"""The OpenAPI description of the SDK actions (drf-spectacular): one operation per PAI action,
named as the SDK names it (CreateJob, ListQuotas, ...), with the query parameters we read.

Bodies and answers are described as JSON objects; their keys are the SDK models' (docs/api-map.md).
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema

PAGING = ("PageNumber", "PageSize", "SortBy", "Order")


class Acs3Scheme(OpenApiAuthenticationExtension):
    target_class = "apikit.auth.Acs3Authentication"
    name = "ACS3-HMAC-SHA256"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey", "in": "header", "name": "Authorization",
            "description": "ACS3-HMAC-SHA256 Credential=<AccessKeyId>,SignedHeaders=<...>,Signature=<hex>, "
                           "with x-acs-date, x-acs-signature-nonce and x-acs-content-sha256, as the official SDKs sign.",
        }


def sdk_action(name: str, summary: str, query=(), body: bool = False):
    """The method serves the SDK action `name`: its OpenAPI operation, and the name SdkView times
    it by (`sdk_action` on the method)."""
    describe = extend_schema(
        operation_id=name,
        summary=summary,
        parameters=[OpenApiParameter(q, OpenApiTypes.STR, OpenApiParameter.QUERY) for q in query],
        request=OpenApiTypes.OBJECT if body else None,
        responses={200: OpenApiTypes.OBJECT},
    )

    def decorate(method):
        method = describe(method)
        method.sdk_action = name
        return method
    return decorate


class SdkSchemaGenerator(SchemaGenerator):
    """Paths as the SDK writes them, without the optional trailing slash of our routes."""

    def get_schema(self, request=None, public=False):
        schema = super().get_schema(request=request, public=public)
        schema["paths"] = {
            (path.rstrip("/") if path.startswith("/api/v1/") else path): item
            for path, item in schema["paths"].items()
        }
        return schema
