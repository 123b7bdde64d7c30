"""Rendering: tables and key/value blocks as Rich renderables (colour by state), JSON and YAML for
scripts, durations and ages. Nothing here writes: `Ctx` (context.py) prints."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml
from rich.table import Table
from rich.text import Text

from gpupool_cli.errors import UsageError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")

# Colour by state (lease, GPU, host, reservation): the eye finds what waits and what failed.
STATE_STYLES = {
    "pending": "yellow", "granted": "green", "bound": "bold green", "released": "dim", "expired": "dim",
    "preempted": "red", "failed": "bold red", "lost": "magenta",
    "free": "green", "leased": "cyan", "cordoned": "yellow", "draining": "yellow", "offline": "red",
    "unhealthy": "bold red", "foreign": "dim", "ready": "green",
    "active": "green", "cancelled": "dim", "ended": "dim",
}


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


def format_clock(seconds: float) -> str:
    """Elapsed time that ticks visibly: 0:07, 12:03, 1:02:03."""
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def age(value: str | None, *, now: datetime | None = None) -> str:
    """'5m' since then; '-' for none."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return format_duration(((now or datetime.now(UTC)) - moment).total_seconds())


def until(value: str | None, *, now: datetime | None = None) -> str:
    """'55m' left until then; '-' for none."""
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
    return str(value).replace("\n", " ")


def state_text(state: str | None) -> Text:
    return Text(cell(state), style=STATE_STYLES.get(state or "", ""))


@dataclass(frozen=True)
class Column:
    header: str
    numeric: bool = False  # right-aligned
    max_width: int = 60  # longer cells are cut with "…"
    state: bool = False  # coloured by STATE_STYLES


def table(columns: Sequence[Column | str], rows: Sequence[Sequence[Any]], *, headers: bool = True) -> Table:
    """Columns two spaces apart, numbers right-aligned, long cells cut, states coloured. A column
    given as a plain header is numeric when every cell is a number (or "-"). A cell is shown as
    `cell` says ("-" for none), unless it is a Text already."""
    cols = [c if isinstance(c, Column) else Column(c, numeric=_numeric(rows, i)) for i, c in enumerate(columns)]
    out = Table(box=None, pad_edge=False, padding=(0, 1), show_header=headers, header_style="bold",
                show_edge=False, highlight=False)
    for col in cols:
        out.add_column(col.header, justify="right" if col.numeric else "left", no_wrap=True,
                       overflow="ellipsis", max_width=col.max_width)
    for row in rows:
        out.add_row(*(v if isinstance(v, Text) else state_text(v) if col.state else Text(cell(v))
                      for col, v in zip(cols, row, strict=True)))
    return out


def keyvalues(pairs: Sequence[tuple[str, Any]]) -> Text:
    """`key:` padded to one width, then the value; a `state` value coloured."""
    width = max((len(k) for k, _ in pairs), default=0)
    out = Text()
    for i, (key, value) in enumerate(pairs):
        out.append(("\n" if i else "") + f"{key + ':':<{width + 1}} ")
        out.append(state_text(value) if key == "state" else Text(cell(value)))
    return out


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str)


def to_yaml(data: Any) -> str:
    return yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False, allow_unicode=True).rstrip()


def _numeric(rows: Sequence[Sequence[Any]], i: int) -> bool:
    values = [cell(row[i]) for row in rows]
    return all(_is_number(v) for v in values) and any(v != "-" for v in values)


def _is_number(value: str) -> bool:
    return value == "-" or bool(re.fullmatch(r"-?\d+(\.\d+)?%?", value))
