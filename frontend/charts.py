"""The overview's utilisation chart: its points and its text summary. The browser draws it with
Chart.js (frontend/static/frontend/history.js), as it draws the history pages' charts, from the
same JSON shape (`history.selectors.chart_json`); the summary is the accessible name and the
caption, so the numbers are in the HTML whether or not the canvas is drawn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from history.selectors import chart_json


@dataclass(frozen=True)
class LineChart:
    start: datetime
    end: datetime
    points: tuple[tuple[datetime, float | None], ...]
    latest: float | None
    mean: float | None
    peak: float | None
    empty: bool

    @property
    def start_label(self) -> str:
        return f"{self.start:%H:%M}"

    @property
    def end_label(self) -> str:
        return f"{self.end:%H:%M}"

    @property
    def summary(self) -> str:
        """An accessible name: what a sighted reader takes from the chart at a glance."""
        if self.empty:
            return "no utilisation samples yet"
        return (f"latest {self.latest:.0f} %, mean {self.mean:.0f} %, peak {self.peak:.0f} % "
                f"between {self.start_label} and {self.end_label} UTC")

    def as_json(self, title: str = "Mean GPU utilisation") -> str:
        """The chart as history.js draws it (a history of one chart), for a `data-chart` attribute."""
        chart = chart_json("utilisation", title, "%", [at for at, _ in self.points],
                           [("util_pct", "Mean", [value for _, value in self.points])])
        return json.dumps({"start": self.start.isoformat(), "end": self.end.isoformat(), "charts": [chart]})


def line_chart(points: list[tuple[datetime, float | None]], *, start: datetime, end: datetime) -> LineChart:
    """`points` (time, value in 0..100; None is a gap, drawn as a break) between `start` and `end`.

    An empty list gives an empty chart (`empty=True`), never an error."""
    values = [v for _, v in points if v is not None]
    return LineChart(start=start, end=end, points=tuple(points),
                     latest=values[-1] if values else None,
                     mean=sum(values) / len(values) if values else None,
                     peak=max(values) if values else None, empty=not values)
