"""Pure helpers of the dashboard: the overview chart's data and summary, and the formatting filters."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from frontend.charts import line_chart
from frontend.templatetags.gpupool_ui import duration, gib, memory_use, short_model, width_pct

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def test_a_chart_spans_its_window_and_keeps_its_gaps_for_chartjs() -> None:
    points = [(T0, 0.0), (T0 + timedelta(minutes=30), 100.0), (T0 + timedelta(minutes=45), None),
              (T0 + timedelta(minutes=60), 50.0)]
    chart = line_chart(points, start=T0, end=T0 + timedelta(minutes=60))
    assert (chart.latest, chart.mean, chart.peak) == (50.0, 50.0, 100.0)
    assert chart.summary == "latest 50 %, mean 50 %, peak 100 % between 12:00 and 13:00 UTC"
    drawn = json.loads(chart.as_json())
    assert (drawn["start"], drawn["end"]) == (T0.isoformat(), (T0 + timedelta(hours=1)).isoformat())
    series = drawn["charts"][0]["series"][0]
    assert series["values"] == [0.0, 100.0, None, 50.0]  # the gap stays a gap: history.js does not bridge it
    assert series["summary"] == {"latest": 50.0, "mean": 50.0, "peak": 100.0}
    assert len(drawn["charts"][0]["at"]) == 4


def test_an_empty_chart_says_so() -> None:
    chart = line_chart([], start=T0, end=T0 + timedelta(hours=1))
    assert chart.empty and chart.summary == "no utilisation samples yet"
    assert json.loads(chart.as_json())["charts"][0]["at"] == []


def test_formatting_filters() -> None:
    assert [duration(s) for s in (None, 5, 65, 3725, 90000)] == ["", "5 s", "1 min 05 s", "1 h 02 min", "1 d 1 h"]
    assert duration(timedelta(seconds=-3)) == "0 s"
    assert short_model("NVIDIA H100 80GB HBM3") == "H100 80GB HBM3"
    assert (gib(81559), gib(512), gib(None)) == ("80 GB", "512 MB", "–")
    assert memory_use(SimpleNamespace(memory_mb=81920, memory_used_mb=664)) == "0.6 / 80 GB"
    assert memory_use(SimpleNamespace(memory_mb=81920, memory_used_mb=None)) == "80 GB"
    assert (width_pct(3, 12), width_pct(20, 10), width_pct(None, 5), width_pct(1, 0)) == ("25.00%", "100.00%",
                                                                                          "0%", "0%")
