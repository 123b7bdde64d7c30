"""Small formatting helpers for the dashboard templates."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def duration(value: Any) -> str:
    """Seconds or a timedelta as "2 h 05 min", "7 min 03 s" or "42 s"; "" for None."""
    if value is None or value == "":
        return ""
    seconds = int(value.total_seconds() if isinstance(value, timedelta) else float(value))
    seconds = max(seconds, 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@register.filter
def since(value: datetime | None) -> str:
    """Time elapsed from `value` to now, as `duration` writes it."""
    return duration(timezone.now() - value) if value else ""


@register.filter
def until(value: datetime | None) -> str:
    """Time left until `value` ("overdue" once it has passed)."""
    if not value:
        return ""
    left = value - timezone.now()
    return duration(left) if left.total_seconds() > 0 else "overdue"


@register.filter
def short_model(value: str) -> str:
    """"NVIDIA H100 80GB HBM3" → "H100 80GB HBM3": the vendor is the same on every tile."""
    return value.removeprefix("NVIDIA ").strip() if value else ""


@register.filter
def gib(value: int | None) -> str:
    """Megabytes as whole gigabytes (nvidia-smi reports MiB; "80 GB" is how people say it)."""
    if value is None:
        return "–"
    return f"{value / 1024:.0f} GB" if value >= 1024 else f"{value} MB"


@register.filter
def memory_use(gpu: Any) -> str:
    """"7.5 / 80 GB" (used / total, in GB), or just the total when no telemetry came in."""
    total = gpu.memory_mb
    if total is None:
        return "–"
    if gpu.memory_used_mb is None:
        return gib(total)
    used = gpu.memory_used_mb / 1024
    return f"{used:.1f} / {total / 1024:.0f} GB" if used < 10 else f"{used:.0f} / {total / 1024:.0f} GB"


@register.filter
def short_id(value: Any) -> str:
    return str(value)[:8]


@register.filter
def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} %"


@register.simple_tag
def width_pct(value: float | int | None, scale: float | int | None) -> str:
    """A CSS width for `value` on a bar of `scale` (clamped to 0–100 %)."""
    if not value or not scale:
        return "0%"
    return f"{max(0.0, min(100.0, 100.0 * float(value) / float(scale))):.2f}%"


@register.simple_tag(takes_context=True)
def query_with(context: dict[str, Any], **changes: Any) -> str:
    """The current query string with some parameters replaced (pagination keeps the filters)."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value in (None, ""):
            params.pop(key, None)
        else:
            params[key] = value
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"



@register.filter
def get_item(mapping: dict[str, Any] | None, key: Any) -> Any:
    """`mapping[str(key)]`, or None: a template's lookup by a variable key (a lease id)."""
    return (mapping or {}).get(str(key))
