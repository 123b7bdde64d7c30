"""What each page shows, checked against the rows behind it."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocation.models import Lease
from inventory.models import Host

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    """The page as words, tags dropped and whitespace folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def test_overview_shows_each_pools_numbers(seeded: Any, client_for: Any) -> None:
    # Backdate one grant: GPU-hours today count from midnight UTC (or the grant, if later).
    now = timezone.now()
    granted = max(now - timedelta(hours=2), now.replace(hour=0, minute=0, second=0, microsecond=0))
    Lease.objects.filter(pk=seeded.leases["vision"].pk).update(granted_at=granted)
    response = client_for(seeded.users["root"]).get("/")  # an admin's overview: the fleet summary
    pools = {s.pool.name: s for s in response.context["pools"]}
    training, inference = pools["training"], pools["inference"]
    assert (training.capacity, training.allocated, training.free, training.borrowed) == (32, 24, 8, 8)
    assert (training.pending_leases, training.pending_gpus) == (2, 20)
    assert round(training.gpu_hours_today, 1) == round(8 * (now - granted).total_seconds() / 3600, 1)
    # The lab: a MIG GPU counts as its two slices; unhealthy, foreign and offline GPUs are separate.
    assert (inference.capacity, inference.foreign, inference.unhealthy, inference.out_of_service) == (13, 1, 1, 1)
    assert not training.chart.empty and 0 <= training.chart.mean <= 100
    page = response.content.decode()
    assert 'data-stat="capacity">32<' in page and 'aria-label="Mean GPU utilisation: latest' in page


def test_overview_answers_htmx_polls_with_the_live_fragment_only(seeded: Any, client_for: Any) -> None:
    response = client_for(seeded.users["alice"]).get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="overview-live")
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="overview-live"') and "<html" not in body
    assert "HX-Request" in response["Vary"]


def test_quotas_show_used_guaranteed_limit_and_standing(seeded: Any, client_for: Any) -> None:
    response = client_for(seeded.users["dave"]).get("/quotas/")
    teams = response.context["teams"]
    assert [t.name for t in teams] == ["research"]  # only his team
    rows = {q.pool.name: q for q in teams[0].quotas}
    assert (rows["training"].used, rows["training"].borrowed, rows["training"].guaranteed,
            rows["training"].limit, rows["training"].pending) == (8, 8, 0, 8, 4)
    assert teams[0].standing["rank"] in (1, 2, 3) and response.context["ranked"] == 3
    assert "Save quota" not in response.content.decode()
    admin_page = client_for(seeded.users["root"]).get("/quotas/")
    assert [t.standing["rank"] for t in admin_page.context["teams"]] == [1, 2, 3]  # in fair-share order
    assert "Save quota of nlp in training" in admin_page.content.decode()
    assert 'name="lending_limit"' in admin_page.content.decode()
    assert 'data-q="lending_limit">all<' in response.content.decode()  # members see it, unset


def test_fleet_marks_states_nests_mig_slices_and_shows_host_errors(seeded: Any, client_for: Any) -> None:
    response = client_for(seeded.users["alice"]).get("/fleet/")
    page = response.content.decode()
    lab = next(r for r in response.context["hosts"] if r.host.name == "lab-a100-0")
    mig = next(t for t in lab.gpus if t.gpu.uuid == "GPU-lab-0")
    assert [s.gpu.mig_profile for s in mig.slices] == ["3g.20gb", "3g.20gb"]
    assert all(t.gpu.parent_id is None for t in lab.gpus)  # slices are not top-level tiles
    assert "Host error:" in page and "connection timed out" in page
    assert re.search(r'data-state="unhealthy".*?Unhealthy.*?XID 79', page, re.S)
    assert re.search(r'data-state="foreign".*?Foreign.*?in use outside gpupool', page, re.S)
    # Alice sees her own leases' ids, not other teams'.
    assert str(seeded.leases["vision"].pk)[:8] in page and str(seeded.leases["nlp"].pk)[:8] not in page
    legend = {state: n for state, _, n in response.context["legend"]}
    assert legend["foreign"] == 1 and legend["unhealthy"] == 1 and legend["offline"] == 1
    filtered = client_for(seeded.users["alice"]).get("/fleet/?pool=training")
    assert {r.host.name for r in filtered.context["hosts"]} == {f"demo-node-{i}" for i in range(4)}
    assert [r.units for r in filtered.context["hosts"]] == [8, 8, 8, 8]


def test_an_admin_cordons_a_host_from_the_fleet_fragment(seeded: Any, client_for: Any) -> None:
    host = Host.objects.get(name="demo-node-3")
    response = client_for(seeded.users["root"]).post(f"/fleet/hosts/{host.pk}/cordon/", HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith(f'<section class="card host-card" id="host-{host.pk}"')
    assert body.count('data-state="cordoned"') == 9  # the host and its 8 GPUs
    assert 'aria-label="Uncordon host demo-node-3"' in body
    bad = client_for(seeded.users["root"]).post(f"/fleet/hosts/{host.pk}/reboot/", HTTP_HX_REQUEST="true")
    assert bad.status_code == 422 and "unknown host action" in bad.content.decode()


def test_the_queue_lists_pending_leases_in_order(seeded: Any, client_for: Any) -> None:
    response = client_for(seeded.users["root"]).get("/queue/")
    leases = response.context["leases"]
    assert [lease.state for lease in leases] == ["pending", "pending"]
    assert [lease.pk for lease in leases] == [seeded.leases["waiting"].pk, seeded.leases["waiting_limit"].pk]
    page = text(response)
    assert "waiting for 16 GPUs" in page and "best-effort" in page


def test_leases_filter_by_state_team_and_pool(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["root"])
    assert len(client.get("/leases/?state=pending").context["leases"]) == 2
    assert {lease.team.name for lease in client.get("/leases/?team=nlp").context["leases"]} == {"nlp"}
    assert {lease.pool.name for lease in client.get("/leases/?pool=inference&state=active").context["leases"]} \
        == {"inference"}
    assert [lease.state for lease in client.get("/leases/?state=released").context["leases"]] == ["released"]
    assert client.get("/leases/?state=bogus").status_code == 200  # an invalid filter shows everything


def test_lease_detail_shows_the_audit_trail_and_binding(seeded: Any, client_for: Any) -> None:
    lease = seeded.leases["done"]
    response = client_for(seeded.users["alice"]).get(f"/leases/{lease.pk}/")
    assert [e.action for e in response.context["events"]] == ["lease.created", "lease.granted", "lease.released"]
    page = text(response)
    assert "finished early" in page and "No workload bound" in page
    assert not response.context["can_act"] and 'id="release-btn"' not in response.content.decode()
    Lease.objects.filter(pk=lease.pk).update(binding_kind="process", binding_spec={"kind": "process", "command": ["x"]},
                                             binding_status={"state": "running", "handle": {"pid": 42}})
    page = text(client_for(seeded.users["alice"]).get(f"/leases/{lease.pk}/"))
    assert "Process over SSH" in page and "pid=42" in page and "running" in page
    Lease.objects.filter(pk=lease.pk).update(binding_status={"state": "stopping", "handle": {"pid": 42}, "stop": {
        "attempts": 3, "error": "SSH handshake failed", "next_attempt_at": "2030-01-01T00:00:20+00:00"}})
    page = text(client_for(seeded.users["alice"]).get(f"/leases/{lease.pk}/"))
    assert "3 failed attempts" in page and "GPUs stay held until the workload is stopped" in page
    assert "SSH handshake failed" in page and "2030-01-01T00:00:20+00:00" in page


def test_lease_detail_shows_the_hosts_source_and_the_selector(seeded: Any, client_for: Any) -> None:
    lease = seeded.leases["done"]
    Lease.objects.filter(pk=lease.pk).update(selector={"source": "demo", "labels": {"zone": "a"}})
    page = text(client_for(seeded.users["alice"]).get(f"/leases/{lease.pk}/"))
    assert f"{lease.host.name} · source {lease.host.source.name}" in page
    assert "source=demo zone=a" in page


def test_an_idle_warning_shows_in_the_lease_list_and_on_the_lease_page(seeded: Any, client_for: Any) -> None:
    lease = seeded.leases["vision"]
    warning = "idle: all 8 GPUs below 5% utilisation since 2030-01-01 00:00:00 UTC (for 1800 s or more)"
    Lease.objects.filter(pk=lease.pk).update(warning=warning, reason=warning, warned_at=timezone.now())
    client = client_for(seeded.users["alice"])
    listing = client.get("/leases/")
    row = re.search(rf'<tr data-lease="{lease.pk}".*?</tr>', listing.content.decode(), re.S)
    assert row is not None and "idle warning" in row.group(0) and "Warning:" in row.group(0)
    page = client.get(f"/leases/{lease.pk}/")
    assert 'id="lease-warning"' in page.content.decode() and f"Warning: {warning}" in text(page)
    Lease.objects.filter(pk=lease.pk).update(warning="", idle_exempt=True)
    page = client.get(f"/leases/{lease.pk}/")
    assert 'id="lease-warning"' not in page.content.decode() and "Idle reclaim exempt" in text(page)
