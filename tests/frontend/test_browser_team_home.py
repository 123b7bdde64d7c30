"""The role homes in Chromium with a 2,000-host fleet (16,000 GPUs): a member's first page is their
team with its leases and queue, an admin's the fleet summary, the teams and pools lists; and a page
whose server is stopped says "stale" within 15 s. Screenshots at 1280 and 390 px in
test-artifacts/screenshots/ (shoot also fails a page wider than the phone)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease, PriorityClass, Team
from inventory.models import Pool
from tests.frontend.browser import log_in, needs_chromium, shoot
from tests.support.processes import web_server
from tests.support.seed import PASSWORD

pytestmark = [pytest.mark.browser, needs_chromium]

FLEET = """
pools: [{name: training-h100}, {name: inference-a100}]
teams: [{name: vision-research, members: [alice]}, {name: nlp, members: [carol]}]
quotas: [{team: vision-research, pool: training-h100, guaranteed: 6000, limit: null},
         {team: nlp, pool: training-h100, guaranteed: 6000, limit: null},
         {team: nlp, pool: inference-a100, guaranteed: 100, limit: null}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: h100, kind: simulated, pool: training-h100, hosts: 1500, gpus_per_host: 8, host_prefix: h100}
  - {name: a100, kind: simulated, pool: inference-a100, hosts: 500, gpus_per_host: 8, host_prefix: a100,
     model: "NVIDIA A100-SXM4-80GB"}
"""


@pytest.fixture
def big_fleet(apply_yaml: Any, make_user: Any, fast_passwords: None) -> dict[str, Any]:
    """2,000 hosts; every training GPU held (1,500 leases of 8, half each team's), 40 waiting."""
    users = {name: make_user(name, admin=name == "root") for name in ("alice", "carol", "root")}
    apply_yaml(FLEET)
    for user in users.values():
        user.set_password(PASSWORD)
        user.save()
    training, default = Pool.objects.get(name="training-h100"), PriorityClass.objects.get(name="default")
    teams = [Team.objects.get(name="vision-research"), Team.objects.get(name="nlp")]

    def add(n: int, gpus: int) -> None:
        Lease.objects.bulk_create([Lease(team=teams[i % 2], user=users[("alice", "carol")[i % 2]], pool=training,
                                         priority_class=default, gpu_count=gpus, ttl_seconds=86400)
                                   for i in range(n)])

    add(1500, 8)
    run_pass([training.pk])
    add(40, 4)
    run_pass([training.pk])
    return users


def test_a_members_first_page_is_their_team_with_its_leases(live_server: Any, big_fleet: Any, page: Any,
                                                            artifacts: Any) -> None:
    base, shots = live_server.url, artifacts / "screenshots"
    log_in(page, base, "alice", PASSWORD)  # lands on "/"
    assert page.get_by_role("heading", level=1).inner_text() == "Team vision-research"
    held = Lease.objects.filter(team__name="vision-research", state="granted")
    assert page.locator('[data-count="leases"]').inner_text() == f"{held.count():,} holding GPUs"  # 750
    rows = page.locator("#team-leases tbody tr")
    assert rows.count() == 25  # the newest 25, the rest a link away
    assert rows.first.get_by_role("button", name=re.compile("^Renew lease")).count() == 1
    waiting = page.locator("#team-queue tbody tr")
    assert waiting.count() == 20 and page.locator('[data-count="queue"]').inner_text() == "20 waiting, 80 GPUs asked"
    assert waiting.first.locator("td.reason").inner_text() not in ("", "–")  # why it waits
    assert page.locator('[data-quota="training-h100"]').inner_text() == "6,000"  # humanized
    # No name breaks at its hyphen, at either width.
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 844})
        cell = page.locator('#team-quotas td[data-label="Pool"] a').first
        assert cell.evaluate("(a) => a.getClientRects().length") == 1, width
    page.set_viewport_size({"width": 1280, "height": 900})
    assert page.locator("[data-live-status]").get_attribute("data-state") == "live"
    # The time is the viewer's, the UTC one on hover.
    assert page.locator("[data-live-status] time").get_attribute("title").endswith(" UTC")
    shoot(page, shots, "team-home-member")

    # The live part polls: a request made meanwhile shows up in the queue without a reload.
    Lease.objects.create(team=Team.objects.get(name="vision-research"), user=big_fleet["alice"],
                         pool=Pool.objects.get(name="training-h100"), gpu_count=4, ttl_seconds=600,
                         priority_class=PriorityClass.objects.get(name="default"))
    page.wait_for_function("() => document.querySelector('[data-count=\"queue\"]').innerText"
                           ".startsWith('21 waiting')")

    # A lease's own page refreshes too (it polls itself and swaps its live part in).
    rows.first.locator("a.mono").click()
    page.wait_for_selector("#lease-live")
    with page.expect_response(lambda r: "/leases/" in r.url and r.request.headers.get("hx-request") == "true"):
        pass
    page.wait_for_function("() => document.querySelector('[data-live-status]').dataset.state === 'live'")
    assert page.locator("#lease-live #lease-state").inner_text() == "Granted"

    page.goto(f"{base}/teams/")
    assert page.locator('[data-team="vision-research"] [data-t="held"]').inner_text() == "6,000"
    assert page.locator(".team-row").count() == 1  # only her team
    shoot(page, shots, "teams-member")
    page.goto(f"{base}/pools/")
    training = page.locator("section.pool-card", has=page.get_by_role("heading", name="training-h100"))
    assert training.locator('[data-stat="capacity"]').inner_text() == "12,000"
    assert training.locator('[data-team="vision-research"]').count() == 1
    shoot(page, shots, "pools-member")


def test_an_admin_lands_on_the_fleet_summary_and_sees_every_team(live_server: Any, big_fleet: Any, page: Any,
                                                                 artifacts: Any) -> None:
    base, shots = live_server.url, artifacts / "screenshots"
    log_in(page, base, "root", PASSWORD)
    assert page.get_by_role("heading", level=1).inner_text() == "Overview"
    assert page.locator("section.pool-card").count() == 2
    page.goto(f"{base}/teams/")
    assert page.locator(".team-row").count() == 2
    shoot(page, shots, "teams-admin")
    page.goto(f"{base}/teams/nlp/")
    assert page.locator("#team-quotas tbody tr").count() == 2
    shoot(page, shots, "team-home-admin")


@pytest.mark.django_db(transaction=True)
def test_a_page_whose_server_stopped_says_stale(make_user: Any, apply_yaml: Any, page: Any, artifacts: Any,
                                               tmp_path: Any) -> None:
    """A real web server (gunicorn + uvicorn) serves the page, then stops; the page must say so.
    (The settings' own password hasher: the server is another process, blind to `fast_passwords`.)"""
    alice = make_user("alice")
    alice.set_password(PASSWORD)
    alice.save()
    apply_yaml("pools: [{name: p}]\nteams: [{name: t, members: [alice]}]\n", discover=False)
    with web_server(tmp_path / "web.log", GPUPOOL_AUTOSCHEDULE="0") as url:
        log_in(page, url, "alice", PASSWORD)
        status = page.locator("[data-live-status]")
        page.wait_for_function("() => document.querySelector('[data-live-status]').dataset.state === 'live'")
        # One poll succeeds while the server is up (the note's time moves on).
        page.wait_for_event("requestfinished", lambda r: "/teams/t/" in r.url, timeout=10_000)
    stopped = time.monotonic()
    page.wait_for_function("() => document.querySelector('[data-live-status]').dataset.state === 'stale'",
                           timeout=15_000)
    took = time.monotonic() - stopped
    text = status.inner_text()
    assert text.startswith("stale — last update ") and "updates failing" in text, text
    assert page.evaluate("document.body.classList.contains('is-stale')")
    print(f"stale shown {took:.1f} s after the server stopped: {text!r}")
    shoot(page, artifacts / "screenshots", "stale-team-home")
    # The page's chart scale (palette.js) tells 30 teams apart: no two share colour and pattern.
    kinds = page.evaluate("""() => Array.from({length: 30}, (_, i) => window.gpupoolPalette.color(i) + "/" +
                                   window.gpupoolPalette.dash(i).join(","))""")
    assert len(set(kinds)) == 30
