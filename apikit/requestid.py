"""One RequestId per API request, in the body (where the SDK reads it) and the x-acs-request-id header."""

import uuid


def request_id(request) -> str:
    request = getattr(request, "_request", request)  # a DRF Request wraps the HttpRequest
    if not hasattr(request, "acs_request_id"):
        request.acs_request_id = str(uuid.uuid4()).upper()
    return request.acs_request_id
