"""The fleet for thousands in Chromium, on a 2,000-host fleet (16,000 GPUs): the heatmap draws every
GPU in one screen at 1280 and 390 px, hover names a GPU and a click reaches it on its host's page;
the heatmap and the table show a change without a reload; a bulk drain of the 10 hosts a filter matches is
previewed, then confirmed. Screenshots in test-artifacts/screenshots/."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease, PriorityClass, Team
from allocation.services.admin import host_admin_action
from inventory.models import Host, Pool
from tests.frontend.browser import WIDTHS, log_in, needs_chromium, shoot
from tests.support.seed import PASSWORD

pytestmark = [pytest.mark.browser, needs_chromium]

FLEET = """
pools: [{name: training}, {name: edge}]
teams: [{name: vision, members: [alice]}]
quotas: [{team: vision, pool: training, guaranteed: 8000, limit: null},
         {team: vision, pool: edge, guaranteed: 80, limit: null}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: h100, kind: simulated, pool: training, hosts: 1990, gpus_per_host: 8, host_prefix: h100}
  - {name: edge, kind: simulated, pool: edge, hosts: 10, gpus_per_host: 8, host_prefix: edge,
     model: "NVIDIA L40S"}
"""


@pytest.fixture
def dense_fleet(apply_yaml: Any, make_user: Any, fast_passwords: None) -> dict[str, Any]:
    """2,000 hosts of 8 GPUs; 500 leases of 8 in training, 5 of 8 on the edge hosts."""
    users = {name: make_user(name, admin=name == "root") for name in ("alice", "root")}
    apply_yaml(FLEET)
    for user in users.values():
        user.set_password(PASSWORD)
        user.save()
    vision, default = Team.objects.get(name="vision"), PriorityClass.objects.get(name="default")
    for pool_name, n in (("training", 500), ("edge", 5)):
        pool = Pool.objects.get(name=pool_name)
        Lease.objects.bulk_create([Lease(team=vision, user=users["alice"], pool=pool, priority_class=default,
                                         gpu_count=8, ttl_seconds=86400) for _ in range(n)])
        run_pass([pool.pk])
    assert Lease.objects.filter(state="granted").count() == 505
    return users


def _heatmap_fits(page: Any, width: int, height: int) -> dict[str, Any]:
    page.set_viewport_size({"width": width, "height": height})
    page.wait_for_function("w => document.getElementById('heat-canvas').dataset.width === String(w)",
                           arg=page.evaluate("document.getElementById('heatmap').clientWidth - 12"))
    box = page.locator("#heat-canvas").bounding_box()
    cells = int(page.locator("#heat-canvas").get_attribute("data-cells"))
    return {"cells": cells, "height": box["height"], "width": box["width"]}


def test_the_heatmap_shows_every_gpu_in_one_screen_and_a_click_reaches_it(
        live_server: Any, dense_fleet: Any, page: Any, artifacts: Any) -> None:
    base, shots = live_server.url, artifacts / "screenshots"
    log_in(page, base, "root", PASSWORD)
    for label, (width, height) in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{base}/fleet/heatmap/")
        page.wait_for_selector("#heat-canvas[data-cells='16000']")
        fit = _heatmap_fits(page, width, height)
        # Every GPU drawn, and the drawing no taller than the screen: 16,000 GPUs at one glance.
        assert fit["cells"] == 16000 and fit["height"] <= height, fit
        assert page.locator("#heat-count").inner_text() == "16,000 GPUs on 2,000 hosts"
        page.evaluate("window.scrollTo(0, 0)")  # a sticky header is drawn where the page is scrolled to
        page.screenshot(path=str(shots / f"fleet-heatmap-{width}.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
        # Hover names the GPU; a click opens its host's page at that GPU.
        page.locator("#heat-canvas").scroll_into_view_if_needed()
        host = Host.objects.get(name="h100-1234")
        cell = page.evaluate("gpupoolHeatmap.cellRect('h100-1234', 5)")
        centre = (cell["x"] + cell["size"] / 2, cell["y"] + cell["size"] / 2)
        page.mouse.move(*centre)
        tip = page.locator("#heat-tip")
        tip.wait_for(state="visible")
        assert tip.inner_text().startswith("h100-1234 · GPU 5\nNVIDIA H100")
        page.mouse.click(*centre)
        page.wait_for_url(f"**/fleet/hosts/{host.pk}/#gpu-{host.pk}-5")
        target = page.locator(f"#gpu-{host.pk}-5")
        assert target.is_visible() and target.evaluate("el => el.matches(':target')")
        page.screenshot(path=str(shots / f"fleet-heatmap-click-{label}-{width}.png"))

    # Colour by utilisation, grouped by source; then a cordon shows without a reload.
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{base}/fleet/heatmap/?group=source")
    page.wait_for_selector("#heat-canvas[data-cells='16000']")
    page.locator("#heat-colour-util").check()
    assert "100 %" in page.locator("#heat-legend").inner_text()
    version = page.locator("#heat-canvas").get_attribute("data-version")
    free = Host.objects.filter(source__name="h100").exclude(gpus__state="leased").order_by("name").first()
    assert free is not None
    host_admin_action(host=free, verb="cordon", actor="root")
    page.wait_for_function("v => document.getElementById('heat-canvas').dataset.version !== v", arg=version,
                           timeout=15_000)
    assert page.locator("#heat-canvas").get_attribute("data-changed") == "8"
    page.screenshot(path=str(shots / "fleet-heatmap-util-by-source-1280.png"), full_page=True)


def test_bulk_drain_of_ten_filtered_hosts_previews_then_drains(
        live_server: Any, dense_fleet: Any, page: Any, artifacts: Any) -> None:
    base, shots = live_server.url, artifacts / "screenshots"
    log_in(page, base, "root", PASSWORD)
    page.goto(f"{base}/fleet/table/")
    assert page.locator("[data-count]").first.inner_text() == "Hosts 1–100 of 2,000"
    first = page.locator("#host-table tbody tr").nth(0).get_attribute("data-host")
    second = page.locator("#host-table tbody tr").nth(1).get_attribute("data-host")
    assert (first, second) == ("edge-0", "edge-1")  # natural order: edge-2 before edge-10 (none here)
    page.locator("#fleet-q").fill("edge")
    page.locator("#fleet-filter").click()
    page.wait_for_url("**/fleet/table/?q=edge")
    assert page.locator("[data-count]").first.inner_text() == "Hosts 1–10 of 10"
    # Live: a host cordoned elsewhere changes its row alone (an out-of-band swap), its tick kept.
    edge8 = Host.objects.get(name="edge-8")
    page.locator(f"#pick-{edge8.pk}").check()
    host_admin_action(host=edge8, verb="cordon", actor="root")
    page.wait_for_function(f"() => document.getElementById('hrow-{edge8.pk}').dataset.state === 'cordoned'",
                           timeout=15_000)
    assert page.locator(f"#pick-{edge8.pk}").is_checked()
    assert page.url.endswith("/fleet/table/?q=edge")
    # The ticked hosts: edge-8 (cordoned already, left alone) and edge-7.
    page.locator(f"#pick-{Host.objects.get(name='edge-7').pk}").check()
    page.locator("#bulk-verb").select_option("cordon")
    page.locator("#bulk-scope-selected").check()
    page.locator("#bulk-preview-button").click()
    page.wait_for_selector("#bulk-result #bulk-title")
    assert page.locator("#bulk-title").inner_text() == "Cordon 1 host (of 2 picked)"
    page.locator("#bulk-verb").select_option("drain")
    page.locator("#bulk-scope-filter").check()
    page.locator("#bulk-preview-button").click()
    page.wait_for_function("() => document.getElementById('bulk-title').innerText.startsWith('Drain')")
    assert page.locator("#bulk-title").inner_text() == "Drain 10 hosts"
    assert page.locator('[data-outcome="preempted"]').inner_text() == "5 leases preempted by the drain"
    assert page.locator('#bulk-pools tr[data-pool="edge"]').count() == 1
    assert not Host.objects.filter(admin_state="draining").exists()  # only a preview so far
    shoot(page, shots, "fleet-bulk-drain-preview")

    page.locator("#bulk-confirm").click()
    page.wait_for_selector(".messages .msg")
    assert "10 host(s) draining" in page.locator(".messages").inner_text()
    assert page.url.endswith("/fleet/table/?q=edge")
    assert set(Host.objects.filter(admin_state="draining").values_list("name", flat=True)) == {
        f"edge-{i}" for i in range(10)}
    assert not Lease.objects.filter(pool__name="edge", state="granted").exists()
    states = page.locator("#host-table tbody tr").evaluate_all("rows => rows.map(r => r.dataset.state)")
    assert states == ["draining"] * 10
    shoot(page, shots, "fleet-bulk-drained-table")
