"""A readable page of the OpenAPI description: every action with its method, path and parameters.

Served from our own template (no CDN-hosted Swagger UI: the console must work offline).
"""

from django.shortcuts import render

from apikit.schema import SdkSchemaGenerator

METHODS = ("get", "post", "put", "delete")


def api_docs(request):
    schema = SdkSchemaGenerator().get_schema(request=None, public=True)
    actions = []
    for route, item in schema["paths"].items():
        for method in METHODS:
            if method in item:
                op = item[method]
                actions.append({
                    "name": op.get("operationId", ""),
                    "method": method.upper(),
                    "path": route,
                    "summary": op.get("summary", ""),
                    "description": op.get("description", ""),
                    "parameters": [p["name"] for p in op.get("parameters", [])],
                })
    return render(request, "api/docs.html", {"actions": actions, "info": schema["info"]})
