"""The usage page: the chart's data and the chargeback table as the caller may see them (members
their teams, admins all), budgets with their warnings, the CSV download of the same table, bad
dates in words; and in Chromium, the chart drawn on its canvas and the CSV downloaded."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocation.models import LeaseUsage
from allocation.services.budgets import budgets_refresh
from tests.frontend.browser import log_in, needs_chromium, shoot
from tests.support.seed import PASSWORD

pytestmark = pytest.mark.django_db
WINDOW = "since=2026-11-09&until=2026-11-11"


@pytest.fixture
def metered(seeded: Any) -> Any:
    """vision used 8 GPUs for 2 h on 10 November (16 GPU-h), research 8 GPUs for 3 h on
    11 November (24 GPU-h); everything else metered long before the window."""
    vision, research = seeded.leases["vision"], seeded.leases["research"]
    LeaseUsage.objects.exclude(lease__in=[vision, research]).update(
        started_at=datetime(2026, 10, 1, tzinfo=UTC), ended_at=datetime(2026, 10, 1, 1, tzinfo=UTC))
    for lease, start, hours in ((vision, datetime(2026, 11, 10, 10, tzinfo=UTC), 2),
                                (research, datetime(2026, 11, 11, tzinfo=UTC), 3)):
        LeaseUsage.objects.filter(lease=lease).update(started_at=start, ended_at=start + timedelta(hours=hours))
    return seeded


def _chart(html: str) -> dict[str, Any]:
    found = re.search(r'<script id="usage-data" type="application/json">(.*?)</script>', html, re.S)
    assert found, "the page embeds the chart's data"
    return json.loads(found.group(1))


def test_an_admin_sees_every_team_in_the_chart_and_the_table(metered: Any, client_for: Any) -> None:
    html = client_for(metered.users["root"]).get(f"/usage/?{WINDOW}").content.decode()
    chart = _chart(html)
    assert chart["days"] == ["2026-11-09", "2026-11-10", "2026-11-11"]
    assert chart["series"] == {"research": [0.0, 0.0, 24.0], "vision": [0.0, 16.0, 0.0]}
    assert re.search(r'<td data-label="Team">research</td><td data-label="GPU-hours" class="num">24.00</td>', html)
    assert re.search(r'<td data-label="Team">vision</td><td data-label="GPU-hours" class="num">16.00</td>', html)
    assert 'src="/static/frontend/vendor/chart.umd.min.js"' in html
    assert f'href="/usage.csv?{WINDOW.replace("&", "&amp;")}"' in html


def test_a_member_sees_their_team_only(metered: Any, client_for: Any) -> None:
    html = client_for(metered.users["alice"]).get(f"/usage/?{WINDOW}&group_by=user").content.decode()
    assert _chart(html)["series"] == {"vision": [0.0, 16.0, 0.0]}
    assert '<td data-label="User">alice</td>' in html and "dave" not in html.split('id="usage-table"')[1]


def test_the_csv_is_the_table_as_a_download(metered: Any, client_for: Any) -> None:
    response = client_for(metered.users["root"]).get(f"/usage.csv?{WINDOW}&group_by=day")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == 'attachment; filename="gpupool-usage-20261109-20261112-by-day.csv"'
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows == [["day", "gpu_hours", "idle_gpu_hours"], ["2026-11-10", "16.0", "0.0"],
                    ["2026-11-11", "24.0", "0.0"]]
    carol = client_for(metered.users["carol"]).get(f"/usage.csv?{WINDOW}").content.decode()
    assert carol == "team,gpu_hours,idle_gpu_hours\n"  # nlp used nothing in the window


def test_bad_dates_are_refused_in_words(metered: Any, client_for: Any) -> None:
    client = client_for(metered.users["root"])
    response = client.get("/usage/?since=someday")
    assert response.status_code == 400 and "Enter a valid date." in response.content.decode()
    backwards = client.get("/usage/?since=2026-11-12&until=2026-11-01")
    assert backwards.status_code == 400 and "since: must be before until" in backwards.content.decode()
    assert client.get("/usage.csv?until=never").status_code == 400
    too_long = client.get("/usage/?since=2020-01-01&until=2026-11-01")
    assert too_long.status_code == 400 and "at most 400 days" in too_long.content.decode()


def test_budgets_show_their_use_and_warning(metered: Any, client_for: Any, apply_yaml: Any) -> None:
    apply_yaml("budgets: [{team: vision, gpu_hours: 1, period: month, action: block_new}]\n", discover=False)
    # vision's 8 GPUs held for the last half hour: 4 GPU-hours this month, whatever the date.
    LeaseUsage.objects.filter(lease=metered.leases["vision"]).update(
        started_at=timezone.now() - timedelta(minutes=30), ended_at=None)
    budgets_refresh()
    html = client_for(metered.users["alice"]).get("/usage/").content.decode()
    assert 'class="budget spent" data-team="vision"' in html
    assert "Spent: new leases are refused" in html
    assert client_for(metered.users["carol"]).get("/usage/").content.decode().count('class="budget') == 0
    assert 'href="/usage/" aria-current="page">Usage</a>' in html


@pytest.mark.browser
@needs_chromium
def test_in_chromium_the_chart_is_drawn_and_the_csv_downloads(live_server: Any, metered: Any, browser: Any,
                                                              artifacts: Any) -> None:
    browser.clear_cookies()
    page = browser.new_page()  # a persistent context accepts downloads
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    base = live_server.url
    log_in(page, base, "root", PASSWORD)
    page.goto(f"{base}/usage/?{WINDOW}")
    page.wait_for_function("window.Chart && Chart.getChart(document.getElementById('usage-chart'))")
    drawn = page.evaluate("""() => {
        const canvas = document.getElementById('usage-chart');
        const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        let painted = 0;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
        const chart = Chart.getChart(canvas);
        return {painted, width: canvas.width, height: canvas.height,
                teams: chart.data.datasets.map(d => d.label), vision: chart.data.datasets[1].data};
    }""")
    assert drawn["width"] > 100 and drawn["height"] > 100
    assert drawn["painted"] > 2000, drawn  # bars, axes and legend, not a blank canvas
    assert drawn["teams"] == ["research", "vision"] and drawn["vision"] == [0, 16, 0]
    shoot(page, artifacts / "screenshots", "usage")
    with page.expect_download() as info:
        page.locator("#usage-csv").click()
    download = info.value
    assert download.suggested_filename == "gpupool-usage-20261109-20261112-by-team.csv"
    with open(download.path(), encoding="utf-8") as fh:
        assert list(csv.reader(fh)) == [["team", "gpu_hours", "idle_gpu_hours"], ["research", "24.0", "0.0"],
                                        ["vision", "16.0", "0.0"]]
    page.close()
    assert not errors, f"JavaScript errors: {errors}"
