"""Views outside the console's pages (which live in console/pages/)."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.templatetags.static import static


@login_required
def home(request):
    return redirect("console:jobs")


def favicon(request):
    # Browsers ask for /favicon.ico on pages without a <link rel="icon"> (the API's docs, JSON answers).
    return redirect(static("console/favicon.svg"), permanent=True)


def healthz(request):
    connection.ensure_connection()
    return JsonResponse({"status": "ok"})
