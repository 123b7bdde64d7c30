"""Server-side SVG charts: the geometry of a small line chart, rendered by a template.

Drawing on the server keeps the dashboard free of a JavaScript chart library, makes the chart
part of the HTML that HTMX swaps, and lets tests assert on numbers rather than pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class LineChart:
    width: int
    height: int
    line: str  # SVG path "M x y L x y …", one sub-path per run of known values
    area: str  # the same runs closed down to the x axis
    gridlines: tuple[tuple[float, str], ...]  # (y, label)
    start_label: str
    end_label: str
    latest: float | None
    mean: float | None
    peak: float | None
    empty: bool

    @property
    def summary(self) -> str:
        """An accessible name: what a sighted reader takes from the chart at a glance."""
        if self.empty:
            return "no utilisation samples yet"
        return (f"latest {self.latest:.0f} %, mean {self.mean:.0f} %, peak {self.peak:.0f} % "
                f"between {self.start_label} and {self.end_label} UTC")


def line_chart(points: list[tuple[datetime, float | None]], *, start: datetime, end: datetime,
               width: int = 560, height: int = 120, y_max: float = 100.0) -> LineChart:
    """Lay out `points` (time, value in 0..y_max; None is a gap) between `start` and `end`.

    An empty list gives an empty chart (`empty=True`) with its axes, never an error."""
    pad_top, pad_bottom = 6, 4
    span = max((end - start).total_seconds(), 1.0)
    plot_h = height - pad_top - pad_bottom

    def xy(at: datetime, value: float) -> tuple[float, float]:
        x = (at - start).total_seconds() / span * width
        y = pad_top + plot_h * (1 - max(0.0, min(value, y_max)) / y_max)
        return round(x, 1), round(y, 1)

    runs: list[list[tuple[float, float]]] = [[]]
    for at, value in points:
        if value is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(xy(at, value))
    runs = [r for r in runs if r]
    base = pad_top + plot_h
    line = " ".join("M " + " L ".join(f"{x} {y}" for x, y in run) for run in runs)
    area = " ".join(f"M {run[0][0]} {base} L " + " L ".join(f"{x} {y}" for x, y in run)
                    + f" L {run[-1][0]} {base} Z" for run in runs)
    values = [v for _, v in points if v is not None]
    grid = tuple((round(pad_top + plot_h * (1 - f), 1), f"{f * y_max:.0f}%") for f in (0.0, 0.5, 1.0))
    return LineChart(
        width=width, height=height, line=line, area=area, gridlines=grid,
        start_label=f"{start:%H:%M}", end_label=f"{end:%H:%M}",
        latest=values[-1] if values else None,
        mean=sum(values) / len(values) if values else None,
        peak=max(values) if values else None, empty=not values)
