"""History pages: a pool and a GPU over time, drawn by Chart.js from the history JSON (a team's
charts are on its page, views/teams.py).

The page embeds the charts of the range asked for (`?range=`, default 24h), so it draws without
a second request; the range links work without JavaScript (a page load) and, with it, fetch the
same JSON from `/api/v1/history/…` and redraw in place. Every chart carries a text summary."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from frontend.access import login_required
from history.choices import DEFAULT_RANGE, RANGES
from history.selectors import History, gpu_history, gpu_window, pool_history, window_for
from inventory.models import Gpu, Pool
from inventory.selectors import pool_stats

RANGE_LABELS = {"1h": "1 hour", "24h": "24 hours", "7d": "7 days", "90d": "90 days"}


def history_range(request: HttpRequest) -> str:
    """The asked range; an unknown one reads as the default (a page is forgiving where the JSON
    API answers 400)."""
    asked = request.GET.get("range", DEFAULT_RANGE)
    return asked if asked in RANGES else DEFAULT_RANGE


def _page(request: HttpRequest, template: str, history: History, api_url: str, **context: Any) -> HttpResponse:
    ranges = [(name, RANGE_LABELS[name]) for name in RANGES]
    return render(request, template, {"history": history, "ranges": ranges, "range": history["range"],
                                      "api_url": api_url, **context})


@login_required
def pool_history_page(request: HttpRequest, name: str) -> HttpResponse:
    pool = get_object_or_404(Pool, name=name)
    now = pool_stats([pool.pk]).get(pool.pk, {"capacity": 0, "allocated": 0, "free": 0, "models": {}})
    return _page(request, "frontend/history/pool.html", pool_history(pool, window_for(history_range(request))),
                 reverse("history-pool", kwargs={"name": pool.name}), pool=pool, now=now)


@login_required
def gpu_history_page(request: HttpRequest, uuid: str) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("host", "pool"), uuid=uuid)
    return _page(request, "frontend/history/gpu.html", gpu_history(gpu, gpu_window(history_range(request))),
                 reverse("history-gpu", kwargs={"uuid": gpu.uuid}), gpu=gpu)
