"""deploy/grafana/gpupool.json: valid JSON whose every query names series that /metrics serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "gpupool.json"


@pytest.mark.django_db
def test_every_series_the_dashboard_queries_is_served() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dash["panels"] for t in panel["targets"]]
    exprs.append(dash["templating"]["list"][1]["query"]["query"])
    queried = {name for expr in exprs for name in re.findall(r"\bgpupool_[a-z_]+", expr)}
    served: set[str] = set()
    for family in text_string_to_metric_families(Client().get("/metrics").content.decode()):
        served |= {family.name, f"{family.name}_total", f"{family.name}_bucket", f"{family.name}_count",
                   f"{family.name}_sum"}
    assert len(queried) >= 7
    assert queried <= served, queried - served
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
