"""Views outside the console's pages (which live in console/pages/)."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect


@login_required
def home(request):
    return redirect("console:jobs")


def healthz(request):
    connection.ensure_connection()
    return JsonResponse({"status": "ok"})
