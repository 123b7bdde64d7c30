"""Rendering: aligned tables, key/value blocks, JSON, durations and ages. Pure functions."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from gpupool_cli.errors import UsageError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str) -> int:
    """`90s`, `30m`, `2h`, `1d`, `1h30m` or plain seconds → whole seconds (at least 1)."""
    value = text.strip().lower()
    if value.isdigit():
        seconds = float(value)
    else:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise UsageError(f"not a duration: {text!r} (use e.g. 90s, 30m, 2h, 1d)", code="bad_duration")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds < 1:
        raise UsageError(f"duration too short: {text!r}", code="bad_duration")
    return int(seconds)


def format_duration(seconds: float | None) -> str:
    """Compact: 45s, 12m, 3h05m, 2d04h. None → '-'."""
    if seconds is None:
        return "-"
    s = int(abs(seconds))
    sign = "-" if seconds < 0 else ""
    if s < 60:
        return f"{sign}{s}s"
    if s < 3600:
        return f"{sign}{s // 60}m"
    if s < 86400:
        return f"{sign}{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{sign}{s // 86400}d{(s % 86400) // 3600:02d}h"


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def age(value: str | None, *, now: datetime | None = None) -> str:
    """'5m ago' style; '-' for none."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return format_duration(((now or datetime.now(UTC)) - moment).total_seconds())


def until(value: str | None, *, now: datetime | None = None) -> str:
    """'in 55m' style remaining time; '-' for none."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return format_duration((moment - (now or datetime.now(UTC))).total_seconds())


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.0f}" if value == int(value) else f"{value:.1f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, max_width: int = 60) -> str:
    """Left-aligned columns separated by two spaces; numbers right-aligned; long cells cut."""
    text = [[_cut(cell(v), max_width) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    numeric = [all(_is_number(row[i]) for row in text) and any(row[i] != "-" for row in text)
               for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) if not numeric[i] else h.rjust(w)
                       for i, (h, w) in enumerate(zip(headers, widths, strict=True))).rstrip()]
    for row in text:
        lines.append("  ".join(v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i])
                               for i, v in enumerate(row)).rstrip())
    return "\n".join(lines)


def keyvalues(pairs: Sequence[tuple[str, Any]]) -> str:
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k + ':':<{width + 1}} {cell(v)}" for k, v in pairs)


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str)


def _cut(value: str, width: int) -> str:
    value = value.replace("\n", " ")
    return value if len(value) <= width else value[: width - 1] + "…"


def _is_number(value: str) -> bool:
    return value == "-" or bool(re.fullmatch(r"-?\d+(\.\d+)?%?", value))
