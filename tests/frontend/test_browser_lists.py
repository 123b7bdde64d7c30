"""Every list page in Chromium with a 2,000-host fleet (16,000 GPUs, 300 waiting leases): filters
and pages driven by clicks, the counts on screen checked against the rows behind them, live
updates without a reload, and screenshots at 1280 and 390 px in test-artifacts/."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease, PriorityClass, Team
from allocation.services.admin import host_admin_action
from allocation.services.leases import lease_create
from inventory.models import Host, Pool
from tests.frontend.browser import log_in, needs_chromium, shoot
from tests.support.seed import PASSWORD

pytestmark = [pytest.mark.browser, needs_chromium]

FLEET = """
pools: [{name: training}, {name: inference}]
teams: [{name: vision, members: [alice]}, {name: nlp, members: [carol]}]
quotas: [{team: vision, pool: training, guaranteed: 6000, limit: null},
         {team: nlp, pool: training, guaranteed: 6000, limit: null},
         {team: nlp, pool: inference, guaranteed: 100, limit: null}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: h100, kind: simulated, pool: training, hosts: 1500, gpus_per_host: 8, host_prefix: h100}
  - {name: a100, kind: simulated, pool: inference, hosts: 500, gpus_per_host: 8, host_prefix: a100,
     model: "NVIDIA A100-SXM4-80GB"}
"""


@pytest.fixture
def big_fleet(apply_yaml: Any, make_user: Any, fast_passwords: None) -> dict[str, Any]:
    """2,000 hosts; every training GPU held (1,500 leases of 8), 300 waiting (4 GPUs each),
    half of them each team's; one host cordoned by root."""
    users = {name: make_user(name, teams=teams, admin=name == "root")
             for name, teams in (("alice", ()), ("carol", ()), ("root", ()))}
    apply_yaml(FLEET)
    for user in users.values():
        user.set_password(PASSWORD)
        user.save()
    training, default = Pool.objects.get(name="training"), PriorityClass.objects.get(name="default")
    teams = [Team.objects.get(name="vision"), Team.objects.get(name="nlp")]

    def add(n: int, gpus: int) -> None:
        Lease.objects.bulk_create([Lease(team=teams[i % 2], user=users[("alice", "carol")[i % 2]], pool=training,
                                         priority_class=default, gpu_count=gpus, ttl_seconds=86400)
                                   for i in range(n)])

    add(1500, 8)
    run_pass([training.pk])
    add(300, 4)
    run_pass([training.pk])
    assert Lease.objects.filter(state="pending").count() == 300
    host_admin_action(host=Host.objects.get(name="a100-7"), verb="cordon", actor="root")
    return users


def count_line(page: Any) -> str:
    return page.locator("[data-count]").first.inner_text()


def wait_count(page: Any, text: str) -> None:
    page.wait_for_function("t => document.querySelector('[data-count]').innerText === t", arg=text)


def test_admin_filters_and_pages_every_list(live_server: Any, big_fleet: Any, page: Any, artifacts: Any) -> None:
    base, shots = live_server.url, artifacts / "screenshots"
    log_in(page, base, "root", PASSWORD)

    # Fleet: 2,000 hosts, 50 a page; the legend counts every GPU, not the page.
    page.goto(f"{base}/fleet/")
    assert count_line(page) == "Hosts 1–50 of 2,000" and page.locator(".host-card").count() == 50
    assert page.locator('[data-legend="leased"]').inner_text() == "Leased: 12,000"
    page.locator("#fleet-pool").select_option("inference")
    page.wait_for_url("**/fleet/?pool=inference")
    assert count_line(page) == "Hosts 1–50 of 500"
    page.locator("#fleet-next").click()
    page.wait_for_url("**/fleet/?pool=inference&page=2")
    assert count_line(page) == "Hosts 51–100 of 500"
    page.locator("#fleet-q").fill("a100-49")
    page.locator("#fleet-filter").click()
    page.wait_for_url("**/fleet/?pool=inference&q=a100-49")
    assert count_line(page) == "Hosts 1–11 of 11"  # a100-49 and a100-490 … a100-499
    shoot(page, shots, "list-fleet-admin")

    # Queue: 300 waiting; a team filter, a sort and the next page, all kept in the URL.
    page.goto(f"{base}/queue/")
    assert count_line(page) == "Pending leases 1–50 of 300"
    assert page.locator('[data-legend="training"]').inner_text() == "training: 300 waiting"
    assert page.locator("[data-gpus-asked]").inner_text() == "1,200 GPUs asked in all"
    page.locator("#queue-team").select_option("nlp")
    page.wait_for_url("**/queue/?team=nlp")
    page.locator("#queue-sort").select_option("waiting")
    page.wait_for_url("**/queue/?team=nlp&sort=waiting")
    page.locator("#queue-next").click()
    page.wait_for_url("**/queue/?team=nlp&sort=waiting&page=2")
    assert count_line(page) == "Pending leases 51–100 of 150"
    assert set(page.locator("#queue-table tbody td[data-label=Team]").all_inner_texts()) == {"nlp"}
    # Live: a new request of nlp shows in the count without a reload, filters and page kept.
    lease_create(user=big_fleet["carol"], pool=Pool.objects.get(name="training"), gpus=2, ttl_seconds=600)
    wait_count(page, "Pending leases 51–100 of 151")
    assert page.url.endswith("/queue/?team=nlp&sort=waiting&page=2")
    shoot(page, shots, "list-queue-admin")

    # Leases: the state legend filters by a click; counts match the rows.
    page.goto(f"{base}/leases/")
    assert count_line(page) == f"Leases 1–50 of {Lease.objects.count():,}"
    page.locator('[data-legend="granted"]').click()
    page.wait_for_url("**/leases/?state=granted")
    assert count_line(page) == "Leases 1–50 of 1,500"
    page.locator("#leases-team").select_option("vision")
    page.wait_for_url("**/leases/?state=granted&team=vision")
    assert count_line(page) == "Leases 1–50 of 750"
    held = Lease.objects.filter(state="granted", team__name="vision").values_list("host__name", flat=True).first()
    assert held is not None
    page.locator("#leases-q").fill(held)
    page.locator("#leases-filter").click()
    page.wait_for_url(f"**/leases/?state=granted&team=vision&q={held}")
    expected = Lease.objects.filter(state="granted", team__name="vision", host__name__icontains=held).count()
    assert count_line(page) == f"Leases 1–{expected} of {expected}"
    shoot(page, shots, "list-leases-admin")

    # Audit: every event, then host actions only; the cordon done above is the one.
    page.goto(f"{base}/audit/")
    assert count_line(page) == f"Events 1–50 of {AuditEvent.objects.count():,}"
    page.locator("#audit-next").click()
    page.wait_for_url("**/audit/?page=2")
    page.locator("#audit-kind").select_option("host")
    page.wait_for_url("**/audit/?kind=host")
    assert count_line(page) == "Events 1–1 of 1"
    assert page.locator("#audit-table tbody tr").first.get_attribute("data-action") == "host.cordon"
    shoot(page, shots, "list-audit-admin")

    # Capacity picker: a host picked on page 1 stays picked across an HTMX page turn.
    page.goto(f"{base}/capacity/?pool=inference")
    assert count_line(page) == "Hosts 1–50 of 500"
    first = Host.objects.get(name="a100-0")
    page.locator(f"#pick-host-{first.pk}").check()
    page.locator("#capacity-next").click()
    page.wait_for_selector("#cap-carried")
    assert count_line(page) == "Hosts 51–100 of 500"
    assert "1 host" in page.locator("#cap-carried").inner_text()
    second = Host.objects.get(name=page.locator(".host-pick").first.get_attribute("data-host"))
    page.locator(f"#pick-host-{second.pk}").check()
    page.get_by_label("Target pool").select_option("training")
    page.get_by_role("button", name="Preview").click()
    page.wait_for_selector("#preview-result")
    assert "move 16 GPUs to pool training" in page.locator("#preview-result h3").inner_text()
    shoot(page, shots, "list-capacity-admin")


def test_a_member_sees_their_teams_rows_and_bad_links_explain_themselves(live_server: Any, big_fleet: Any,
                                                                         page: Any, artifacts: Any) -> None:
    base, shots = live_server.url, artifacts / "screenshots"
    log_in(page, base, "alice", PASSWORD)
    page.goto(f"{base}/queue/?team=nlp&page=zero")  # a link shared by someone of another team
    assert "Team “nlp” is not one of vision" in page.locator("#queue-problems").inner_text()
    assert count_line(page) == "Pending leases 1–50 of 150"
    assert set(page.locator("#queue-table tbody td[data-label=Team]").all_inner_texts()) == {"vision"}
    shoot(page, shots, "list-queue-member")
    page.goto(f"{base}/leases/?state=pending&sort=size")
    assert count_line(page) == "Leases 1–50 of 150"
    page.locator("#leases-next").click()
    page.wait_for_url("**/leases/?state=pending&sort=size&page=2")
    assert count_line(page) == "Leases 51–100 of 150"
    shoot(page, shots, "list-leases-member")
    page.goto(f"{base}/audit/")
    visible = AuditEvent.objects.filter(lease__team__members=get_user_model().objects.get(username="alice"))
    assert count_line(page) == f"Events 1–50 of {visible.count():,}"
    assert page.locator('[data-legend="host"]').count() == 0  # admin actions are not for members
    shoot(page, shots, "list-audit-member")
