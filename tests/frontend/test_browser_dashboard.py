"""The dashboard in a real browser: members and admins log in, numbers match the API, a host is
cordoned, capacity is moved after a preview; every page is photographed at 1280 and 390 px."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests

from allocation.engine import run_pass
from allocation.services.leases import lease_create
from inventory.models import Gpu, Host
from tests.frontend.browser import log_in, needs_chromium, series_pixels, shoot
from tests.support.seed import PASSWORD
from tests.support.tokens import api_key

pytestmark = [pytest.mark.browser, needs_chromium]


@pytest.fixture
def shots(artifacts: Any) -> Any:
    return artifacts / "screenshots"


def api_quotas(base: str, user: Any) -> dict[tuple[str, str], dict[str, Any]]:
    key = api_key(user, scope="read")  # a dashboard's token: reads are all it needs
    body = requests.get(f"{base}/api/v1/quotas/", headers={"Authorization": f"Token {key}"}, timeout=10).json()
    return {(q["team"], q["pool"]): q for q in body["results"]}


def bar_numbers(page: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """What the quota bars say, read from the page as a user sees it."""
    rows = page.locator(".quota-row")
    out = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        limit = row.locator('[data-q="limit"]').inner_text()
        lends = row.locator('[data-q="lending_limit"]').inner_text()
        out[(row.get_attribute("data-team"), row.get_attribute("data-pool"))] = {
            "used": int(row.locator('[data-q="used"]').inner_text()),
            "borrowed": int(row.locator('[data-q="borrowed"]').text_content()),
            "guaranteed": int(row.locator('[data-q="guaranteed"]').inner_text()),
            "limit": None if limit == "none" else int(limit),
            "lending_limit": None if lends == "all" else int(lends),
        }
    return out


def test_member_sees_their_teams_and_numbers_match_the_api(live_server: Any, seeded: Any, page: Any,
                                                          shots: Any) -> None:
    base = live_server.url
    page.goto(f"{base}/quotas/")
    assert "/login/" in page.url  # anonymous: sent to the login form
    shoot(page, shots, "login")
    log_in(page, base, "dave", PASSWORD)

    # A new request is granted by a pass; the bars must show it, exactly as the API counts it.
    lease_create(user=seeded.users["dave"], pool=seeded.pools["inference"], gpus=2, model="MIG 3g.20gb",
                 ttl_seconds=600)
    run_pass()
    page.goto(f"{base}/quotas/")
    shown, api = bar_numbers(page), api_quotas(base, seeded.users["dave"])
    assert set(shown) == {("research", "training"), ("research", "inference")}  # only dave's team
    for key, numbers in shown.items():
        assert numbers == {k: api[key][k] for k in ("used", "borrowed", "guaranteed", "limit",
                                                    "lending_limit")}, key
    assert shown[("research", "training")]["borrowed"] == 8
    assert page.locator('[data-team="research"] [data-q="rank"]').inner_text().startswith("#")
    assert page.get_by_role("button", name=re.compile("Save quota")).count() == 0  # members cannot edit
    shoot(page, shots, "quotas-member")

    page.goto(f"{base}/")  # a member's overview is their team's page
    assert page.locator("nav").get_by_role("link", name="Capacity").count() == 0
    assert page.get_by_role("heading", level=1).inner_text() == "Team research"
    shoot(page, shots, "overview-member")
    page.goto(f"{base}/pools/")  # the fleet summary a member still reaches
    training = page.locator("section.pool-card", has=page.get_by_role("heading", name="training"))
    assert training.locator('[data-stat="capacity"]').inner_text() == "32"
    assert training.locator('[data-stat="allocated"]').inner_text() == "24"
    chart = training.locator("canvas[role=img]")
    assert chart.get_attribute("aria-label").startswith("Mean GPU utilisation: latest")
    # Chart.js drew it: the line's colour is on the canvas.
    assert series_pixels(chart) > 100
    shoot(page, shots, "pools-member-seeded")

    page.goto(f"{base}/queue/")
    rows = page.locator("#queue-table tbody tr")
    assert rows.count() == 1 and "research" in rows.first.inner_text()  # alice's waiting lease is not dave's
    shoot(page, shots, "queue-member")
    # Live refresh: a new pending lease of his team appears without a reload.
    lease_create(user=seeded.users["dave"], pool=seeded.pools["training"], gpus=1, ttl_seconds=600)
    page.wait_for_function("document.querySelectorAll('#queue-table tbody tr').length === 2", timeout=8000)

    page.goto(f"{base}/leases/?state=granted")
    assert page.locator("#lease-table tbody tr").count() == 2
    shoot(page, shots, "leases-member")
    page.locator("#lease-table tbody tr a").first.click()
    page.wait_for_selector("#audit-trail")
    assert "lease.created" in page.locator("#audit-trail").inner_text()
    shoot(page, shots, "lease-detail-member")

    page.goto(f"{base}/leases/{seeded.leases['vision'].pk}/")  # another team's lease
    assert page.get_by_role("heading", name="Not found").is_visible()
    page.goto(f"{base}/capacity/")
    assert page.get_by_role("heading", name="Not allowed").is_visible()
    page.goto(f"{base}/fleet/")
    assert page.get_by_role("button", name=re.compile("Cordon host")).count() == 0
    shoot(page, shots, "fleet-member")


def test_admin_cordons_edits_quotas_and_moves_capacity(live_server: Any, seeded: Any, page: Any,
                                                      shots: Any) -> None:
    base = live_server.url
    log_in(page, base, "root", PASSWORD)
    shoot(page, shots, "overview-admin")

    # Cordon: the host's free GPUs turn "Cordoned" (colour and text), its leased ones stay leased.
    page.goto(f"{base}/fleet/")
    host = Host.objects.get(name="demo-node-3")
    card = page.locator(f"#host-{host.pk}")
    assert card.locator('[data-state="free"]').count() == 8
    card.get_by_role("button", name="Cordon host demo-node-3").click()
    page.wait_for_selector(f'#host-{host.pk}[data-state="cordoned"]')
    card = page.locator(f"#host-{host.pk}")
    assert card.locator('.gpu[data-state="cordoned"]').count() == 8
    assert card.locator('.gpu[data-state="cordoned"] .badge').first.inner_text() == "Cordoned"
    assert set(Gpu.objects.filter(host=host).values_list("state", flat=True)) == {"cordoned"}
    assert page.locator(".host-error").filter(has_text="connection timed out").count() == 1
    assert page.locator('.slices [data-state="free"]').count() == 2  # MIG slices under their GPU
    shoot(page, shots, "fleet-admin")

    # Quotas: a limit below the guarantee is refused with a reason; a valid edit matches the API.
    page.goto(f"{base}/quotas/")
    row = page.locator('.quota-row[data-team="nlp"][data-pool="training"]')
    row.get_by_label("Limit").fill("4")
    row.get_by_role("button", name="Save quota of nlp in training").click()
    page.wait_for_selector('.quota-row[data-team="nlp"][data-pool="training"] [role=alert]')
    assert "below guaranteed 8" in page.locator('.quota-row[data-team="nlp"][data-pool="training"]').inner_text()
    row = page.locator('.quota-row[data-team="nlp"][data-pool="training"]')
    row.get_by_label("Guaranteed").fill("10")
    row.get_by_label("Limit").fill("20")
    row.get_by_role("button", name="Save quota of nlp in training").click()
    page.wait_for_selector('.quota-row[data-team="nlp"][data-pool="training"] .saved')
    assert api_quotas(base, seeded.users["root"])[("nlp", "training")]["limit"] == 20
    assert bar_numbers(page)[("nlp", "training")]["guaranteed"] == 10
    # The lending limit: above the guarantee is refused with the field named; at most it is saved.
    row = page.locator('.quota-row[data-team="nlp"][data-pool="training"]')
    row.get_by_label("Lends").fill("12")
    row.get_by_role("button", name="Save quota of nlp in training").click()
    page.wait_for_selector('.quota-row[data-team="nlp"][data-pool="training"] [role=alert]')
    alert = page.locator('.quota-row[data-team="nlp"][data-pool="training"] [role=alert]').inner_text()
    assert "Lends: Lending limit 12 is above guaranteed 10" in alert
    assert api_quotas(base, seeded.users["root"])[("nlp", "training")]["lending_limit"] is None
    row = page.locator('.quota-row[data-team="nlp"][data-pool="training"]')
    row.get_by_label("Lends").fill("3")
    row.get_by_role("button", name="Save quota of nlp in training").click()
    page.wait_for_selector('.quota-row[data-team="nlp"][data-pool="training"] .saved')
    assert api_quotas(base, seeded.users["root"])[("nlp", "training")]["lending_limit"] == 3
    assert bar_numbers(page)[("nlp", "training")]["lending_limit"] == 3
    shoot(page, shots, "quotas-admin")

    # Capacity: moving demo-node-1 (research's 8 borrowed GPUs) to inference, where research may hold 4.
    page.goto(f"{base}/capacity/")
    node = Host.objects.get(name="demo-node-1")
    page.get_by_label("Target pool").select_option("inference")
    page.locator(f"#pick-host-{node.pk}").check()
    page.get_by_role("button", name="Preview").click()
    page.wait_for_selector("#preview-result")
    impact = page.locator(f'#preview-leases tr[data-lease="{seeded.leases["research"].pk}"]')
    assert impact.get_attribute("data-outcome") == "over_limit"
    assert "over by 4" in impact.inner_text()
    pools = page.locator("#preview-pools")
    assert "32 → 24" in pools.locator('tr[data-pool="training"]').inner_text()
    shoot(page, shots, "capacity-preview")
    page.locator("#confirm-btn").click()
    page.wait_for_selector("#capacity-done")
    assert "Moved 8 GPU(s) to pool inference" in page.locator("#capacity-done").inner_text()
    assert set(Gpu.objects.filter(host=node).values_list("pool__name", flat=True)) == {"inference"}
    assert Host.objects.get(pk=node.pk).state == "cordoned"  # fenced: its lease still holds the GPUs
    shoot(page, shots, "capacity-done")

    page.goto(f"{base}/queue/")
    shoot(page, shots, "queue-admin")
    page.goto(f"{base}/leases/{seeded.leases['research'].pk}/")
    shoot(page, shots, "lease-detail-admin")
    page.goto(f"{base}/admin/")
    shoot(page, shots, "django-admin")
