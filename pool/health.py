"""Liveness/readiness, Prometheus metrics, and JSON error pages for the API paths."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database answers; 503 otherwise (with the reason). `?probe=liveness` asks only
    whether this process serves requests (a Kubernetes liveness probe: a database outage must
    make pods unready, never restart them all)."""
    if request.GET.get("probe") == "liveness":
        return JsonResponse({"status": "ok"})
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"status": "unavailable", "database": str(exc)[:200]}, status=503)
    return JsonResponse({"status": "ok", "database": connection.vendor})


def metrics(request: HttpRequest) -> HttpResponse:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from core.tasks import TASK_METRICS
    from pool.metrics import registry

    # The pool gauges, then the task metrics of this process (tasks run here when CELERY_TASK_ALWAYS_EAGER is set).
    body = generate_latest(registry()) + generate_latest(TASK_METRICS)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def not_found(request: HttpRequest, exception: Any = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"code": "not_found", "message": f"no such endpoint: {request.path}"}, status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"code": "server_error", "message": "internal error; it has been logged"}, status=500)
