"""The history pages in Chromium with a 2,000-host fleet (16,000 GPUs) and 90 days of history:
each chart is drawn (its first series' colour is on the canvas, read back as pixels), the range
links redraw by clicks (fewer points for 1 hour, hourly points for 90 days), at 1280 and 390 px;
the overview's chart survives its HTMX refresh; screenshots in test-artifacts/screenshots/history-*.png."""

from __future__ import annotations

from typing import Any

import pytest

from tests.frontend.browser import WIDTHS, log_in, needs_chromium, series_pixels, shoot
from tests.support.seed import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]

FLEET = """
pools: [{name: big}]
teams: [{name: a, members: [ann]}, {name: b}, {name: c}]
quotas:
  - {team: a, pool: big, guaranteed: 4000, limit: 9000}
  - {team: b, pool: big, guaranteed: 4000, limit: null}
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: big, hosts: 2000, gpus_per_host: 8}]
"""



@pytest.fixture
def big_fleet(apply_yaml: Any, make_user: Any, fast_passwords: None) -> str:
    """The fleet, 3,000 GPUs held by team a, history seeded; returns a GPU's UUID to look at."""
    from allocation.engine import run_pass
    from allocation.models import Lease, PriorityClass, Team
    from bench.history_seed import seed_history
    from history.services import history_record
    from inventory.models import Gpu, Pool

    apply_yaml(FLEET)
    ann = make_user("ann", teams=("a",))
    root = make_user("root", admin=True)
    root.set_password(PASSWORD)
    root.save()
    pool = Pool.objects.get(name="big")
    Lease.objects.bulk_create([Lease(team=Team.objects.get(name="a"), user=ann, pool=pool, gpu_count=8,
                                     priority_class=PriorityClass.objects.get(name="default"), ttl_seconds=3600)
                               for _ in range(375)])
    run_pass([pool.pk])
    uuid = Gpu.objects.order_by("pk").values_list("uuid", flat=True)[0]
    seed_history(gpu_uuids=[uuid])
    history_record()
    return uuid


def _drawn(page: Any, chart_id: str) -> dict[str, int]:
    """What the chart shows: pixels of its first series, its points, its width on screen."""
    canvas = page.locator(f'[data-chart-id="{chart_id}"] canvas')
    points, width = canvas.evaluate("(c) => [Chart.getChart(c).data.datasets[0].data.length, c.clientWidth]")
    return {"pixels": series_pixels(canvas), "points": points, "width": width}


def _pick(page: Any, range_name: str, label: str) -> None:
    page.get_by_role("link", name=f"Last {label}").click()
    page.wait_for_selector(f'[data-history][data-drawn="{range_name}"]')
    assert page.url.endswith(f"?range={range_name}")


def test_history_pages_draw_their_charts_and_switch_ranges_by_clicks(live_server: Any, big_fleet: str,
                                                                      browser: Any, artifacts: Any) -> None:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, live_server.url, "root", PASSWORD)
    pages = [("/pools/big/", "pool", "allocation", 4), ("/teams/a/", "team", "quota-big", 2),
             (f"/gpus/{big_fleet}/", "gpu", "util", 4)]
    for path, name, chart_id, charts in pages:
        page.goto(live_server.url + path)
        page.wait_for_selector('[data-history][data-drawn="24h"]')
        assert page.locator("[data-chart-id] canvas").count() >= charts - 1
        day = _drawn(page, chart_id)
        assert day["pixels"] > 300, (name, day)
        _pick(page, "1h", "1 hour")
        hour = _drawn(page, chart_id)
        assert 0 < hour["points"] < max(day["points"], 61) and hour["pixels"] > 300, (name, hour)
        _pick(page, "90d", "90 days")
        quarter = _drawn(page, chart_id)
        assert quarter["points"] > 2000 and quarter["pixels"] > 300, (name, quarter)
        # The text alternative follows the range.
        assert page.locator(f'[data-chart-id="{chart_id}"] canvas').get_attribute("aria-label").count("peak") >= 1
        shoot(page, artifacts / "screenshots", f"history-{name}")
        phone = WIDTHS["phone"]
        page.set_viewport_size({"width": phone[0], "height": phone[1]})
        page.wait_for_timeout(150)  # Chart.js redraws on resize
        narrow = _drawn(page, chart_id)
        assert narrow["width"] < phone[0] and narrow["pixels"] > 150, (name, narrow)
        page.set_viewport_size({"width": WIDTHS["desktop"][0], "height": WIDTHS["desktop"][1]})
    # The overview's utilisation chart is Chart.js too, redrawn when HTMX swaps the live part in
    # (every 5 s) without leaving the old charts behind.
    page.goto(live_server.url + "/")
    chart = page.locator("section.pool-card canvas[data-sparkline]")
    assert series_pixels(chart) > 100
    page.evaluate("""() => new Promise((done) => document.addEventListener("htmx:afterSettle", done, {once: true}))""")
    assert series_pixels(page.locator("section.pool-card canvas[data-sparkline]")) > 100
    assert page.evaluate("Object.keys(Chart.instances).length") == 1
    page.close()
    assert not errors, f"JavaScript errors: {errors}"
