"""The history pages: a pool's, a team's and a GPU's charts embedded as JSON with their text
summaries and range links; who may open which; the overview, quotas, fleet and lease pages link
to them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

pytestmark = pytest.mark.django_db


def _embedded(html: str) -> dict[str, Any]:
    found = re.search(r'<script id="history-data" type="application/json">(.*?)</script>', html, re.S)
    assert found, "no embedded history"
    return json.loads(found.group(1))


def test_the_pool_page_embeds_its_charts_with_summaries_and_range_links(recorded: Any, client_for: Any,
                                                                       make_user: Any) -> None:
    response = client_for(make_user("alice")).get("/pools/training/?range=1h")
    assert response.status_code == 200
    html = response.content.decode()
    history = _embedded(html)
    assert history["range"] == "1h" and [c["id"] for c in history["charts"]] == ["utilisation", "allocation", "queue"]
    assert 'href="?range=7d"' in html and 'data-range="1h" aria-current="true"' in html
    assert "vendor/chart.umd.min.js" in html and "/api/v1/history/pools/training" in html
    # The text alternative: each series' latest, mean and peak.
    assert "Allocated now 28, mean 28, peak 28" in html
    assert "now 3 · mean 3 · peak 3" in html  # queue length


def test_an_unknown_range_on_a_page_shows_the_default(recorded: Any, client_for: Any, make_user: Any) -> None:
    response = client_for(make_user("alice")).get("/pools/training/?range=forever")
    assert response.status_code == 200 and _embedded(response.content.decode())["range"] == "24h"


def test_the_team_page_is_for_members_and_admins(recorded: Any, client_for: Any, make_user: Any) -> None:
    carol = make_user("carol", teams=("nlp",))
    html = client_for(carol).get("/teams/nlp/").content.decode()
    assert [c["id"] for c in _embedded(html)["charts"]][:2] == ["quota-inference", "wait-inference"]
    row = re.search(r'<tr data-pool="training">.*?</tr>', html, re.S)
    assert row is not None
    cells = dict(re.findall(r'data-label="([^"]+)" class="num"[^>]*>(?:<span[^>]*>)?([^<]+)<', row.group(0)))
    assert (cells["Held"], cells["Guaranteed"], cells["Limit"], cells["Borrowed"], cells["Asked (waiting)"]) == (
        "16", "8", "16", "8", "24")
    assert client_for(make_user("dave", teams=("research",))).get("/teams/nlp/").status_code == 404
    assert client_for(make_user("root", admin=True)).get("/teams/nlp/").status_code == 200
    assert client_for(None).get("/teams/nlp/").status_code == 302  # to the login form


def test_the_gpu_page_shows_its_telemetry_charts(recorded: Any, client_for: Any, make_user: Any) -> None:
    from inventory.models import Gpu

    gpu = Gpu.objects.filter(pool__name="training").order_by("pk").first()
    assert gpu is not None
    response = client_for(make_user("alice")).get(f"/gpus/{gpu.uuid}/")
    assert response.status_code == 200
    assert [c["id"] for c in _embedded(response.content.decode())["charts"]] == ["util", "memory", "temperature",
                                                                                  "power"]
    assert client_for(make_user("alice")).get("/gpus/GPU-none/").status_code == 404


def test_other_pages_link_to_the_history_pages(recorded: Any, client_for: Any, make_user: Any) -> None:
    client = client_for(make_user("root", admin=True))
    assert 'href="/pools/training/"' in client.get("/").content.decode()
    assert 'href="/teams/nlp/"' in client.get("/quotas/").content.decode()
    assert re.search(r'href="/gpus/[^"]+/"', client.get("/fleet/").content.decode())
