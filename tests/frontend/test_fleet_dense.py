"""The fleet for thousands, server side: names in natural order, the heatmap's compact payload and
its diffs, the compact table, live polls that send only the hosts that changed, and bulk
cordon/drain/uncordon previewed then confirmed (stale previews refused, members refused)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease, PriorityClass, Team
from allocation.services.admin import host_admin_action
from inventory.models import Gpu, Host, Pool

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: training}]
teams: [{name: vision, members: [ann]}]
quotas: [{team: vision, pool: training, guaranteed: 8, limit: null}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: sim, kind: simulated, pool: training, hosts: 12, gpus_per_host: 4, host_prefix: node}
"""


@pytest.fixture
def fleet(apply_yaml: Any, make_user: Any, client_for: Any) -> dict[str, Any]:
    """12 hosts (node-0 … node-11) of 4 GPUs; vision holds 6 leases of 4 GPUs."""
    ann = make_user("ann", teams=("vision",))
    apply_yaml(FLEET)
    pool = Pool.objects.get(name="training")
    Lease.objects.bulk_create([Lease(team=Team.objects.get(name="vision"), user=ann, pool=pool,
                                     priority_class=PriorityClass.objects.get(name="default"), gpu_count=4,
                                     ttl_seconds=3600) for _ in range(6)])
    run_pass([pool.pk])
    assert Lease.objects.filter(state="granted").count() == 6
    return {"admin": client_for(make_user("root", admin=True)), "member": client_for(ann)}


def _free_host() -> Host:
    host = Host.objects.exclude(gpus__state="leased").order_by("name").last()
    assert host is not None
    return host


def _hosts(html: str) -> list[str]:
    return re.findall(r'data-host="([^"]+)"', html)


def test_host_names_sort_naturally_in_the_fleet_the_table_and_the_api(fleet: Any, api: Any) -> None:
    natural = [f"node-{i}" for i in range(12)]
    assert _hosts(fleet["admin"].get("/fleet/").content.decode()) == natural
    assert _hosts(fleet["admin"].get("/fleet/table/").content.decode()) == natural
    assert _hosts(fleet["admin"].get("/fleet/?sort=-name").content.decode()) == natural[::-1]
    assert list(Host.objects.order_by("name").values_list("name", flat=True)) == natural
    heat = fleet["admin"].get("/fleet/heatmap.json").json()
    assert [h[1] for h in heat["hosts"]] == natural


def test_the_heatmap_payload_has_one_cell_per_gpu_and_answers_only_what_changed(fleet: Any) -> None:
    client = fleet["admin"]
    body = client.get("/fleet/heatmap.json").json()
    cells = body["cells"]
    assert len(cells["s"]) == sum(cells["n"]) == Gpu.objects.filter(parent__isnull=True, gone=False).count() == 48
    assert cells["i"] is None  # every host numbers its GPUs 0…3: the indexes are left out
    leased = [i for i, s in enumerate(cells["s"]) if body["states"][s] == "leased"]
    assert len(leased) == 24 and {body["teams"][cells["t"][i]] for i in leased} == {"vision"}
    # Nothing changed: 304, by `since` or by ETag.
    assert client.get(f"/fleet/heatmap.json?since={body['version']}").status_code == 304
    assert client.get("/fleet/heatmap.json", HTTP_IF_NONE_MATCH=f'"{body["version"]}"').status_code == 304
    # A cordon changes a free host's four cells (leased GPUs stay leased), and only those are sent.
    free = _free_host()
    host_admin_action(host=free, verb="cordon", actor="root")
    diff = client.get(f"/fleet/heatmap.json?since={body['version']}").json()
    position = [h[1] for h in body["hosts"]].index(free.name) * 4
    assert [c[0] for c in diff["changed"]] == [position + k for k in range(4)]
    assert {body["states"][c[1]] for c in diff["changed"]} == {"cordoned"}
    assert diff["version"] != body["version"] and diff["host_states"] == [[position // 4, "cordoned"]]
    # An unknown version, or other filters: the whole payload.
    assert "cells" in client.get("/fleet/heatmap.json?since=0000").json()
    grouped = client.get("/fleet/heatmap.json?group=source").json()
    assert grouped["groups"] == ["sim"] and grouped["group"] == "source"
    bad = client.get("/fleet/heatmap.json?group=row")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_group"


def test_a_member_sees_other_teams_as_another_team(fleet: Any, make_user: Any, client_for: Any) -> None:
    outsider = client_for(make_user("bob"))
    body = outsider.get("/fleet/heatmap.json").json()
    assert set(body["teams"]) == {"", "another team"}


def test_heatmap_page_and_host_page_lead_to_the_gpu(fleet: Any) -> None:
    page = fleet["admin"].get("/fleet/heatmap/?group=rack").content.decode()
    assert 'id="heat-canvas"' in page and 'value="rack" selected' in page
    host = Host.objects.get(name="node-3")
    html = fleet["admin"].get(f"/fleet/hosts/{host.pk}/").content.decode()
    assert f'id="gpu-{host.pk}-2"' in html and f'id="host-{host.pk}"' in html
    assert fleet["admin"].get("/fleet/hosts/999999/").status_code == 404


def _poll(client: Any, path: str, version: str) -> Any:
    return client.get(f"{path}?v={version}", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="fleet-poll")


def _version(html: str) -> str:
    found = re.search(r'id="fleet-version" name="v" value="([0-9a-f]+)"', html)
    assert found, "no live version on the page"
    return found.group(1)


@pytest.mark.parametrize("path, row_id", [("/fleet/", "host-"), ("/fleet/table/", "hrow-")])
def test_a_live_poll_sends_only_the_hosts_that_changed(fleet: Any, path: str, row_id: str) -> None:
    client = fleet["admin"]
    version = _version(client.get(path).content.decode())
    assert _poll(client, path, version).status_code == 204  # nothing changed
    node = _free_host()
    host_admin_action(host=node, verb="cordon", actor="root")
    answer = _poll(client, path, version)
    html = answer.content.decode()
    assert answer.status_code == 200
    assert re.findall(rf'id="({row_id}\d+)" hx-swap-oob="outerHTML"', html) == [f"{row_id}{node.pk}"]
    assert 'id="fleet-legend" hx-swap-oob' in html  # the counts changed: 4 GPUs cordoned
    new = _version(html.replace(' hx-swap-oob="true"', ""))
    assert new != version and _poll(client, path, new).status_code == 204
    # A version the server does not know: the whole live part, swapped out of band.
    full = _poll(client, path, "feedbeef").content.decode()
    assert full.lstrip().startswith('<div id="fleet-live" hx-swap-oob="outerHTML"')


def _drain_form(**extra: Any) -> dict[str, Any]:
    return {"verb": "drain", "scope": "filter", "q": "node-1", "back": "/fleet/table/?q=node-1", **extra}


def test_bulk_drain_of_filtered_hosts_previews_then_drains(fleet: Any) -> None:
    client = fleet["admin"]
    names = ["node-1", "node-10", "node-11"]  # name contains node-1
    held = Lease.objects.filter(state="granted", host__name__in=names)
    preview = client.post("/fleet/bulk/preview/", _drain_form(), HTTP_HX_REQUEST="true")
    assert preview.status_code == 200
    p = preview.context["preview"]
    assert [h.name for h in p.hosts] == names and p.can_confirm
    assert {i.lease_id for i in p.preempted} >= {str(x.pk) for x in held}
    html = preview.content.decode()
    assert "Drain 3 hosts" in html and f'value="{p.fingerprint}"' in html
    assert not AuditEvent.objects.filter(action="host.drain").exists()  # a preview writes nothing

    confirm = client.post("/fleet/bulk/confirm/", {"verb": "drain", "fingerprint": p.fingerprint,
                                                   "hosts": list(p.host_ids), "back": "/fleet/table/?q=node-1"},
                          HTTP_HX_REQUEST="true")
    assert confirm.status_code == 204 and confirm["HX-Redirect"] == "/fleet/table/?q=node-1"
    assert set(Host.objects.filter(admin_state="draining").values_list("name", flat=True)) == set(names)
    audited = AuditEvent.objects.filter(action="host.drain").values_list("object_id", flat=True)
    assert sorted(audited) == sorted(str(h.host_id) for h in p.hosts)
    assert not Lease.objects.filter(pk__in=[x.pk for x in held], state="granted").exists()


def test_a_stale_bulk_preview_is_refused_and_shown_again(fleet: Any) -> None:
    client = fleet["admin"]
    p = client.post("/fleet/bulk/preview/", _drain_form(), HTTP_HX_REQUEST="true").context["preview"]
    host_admin_action(host=Host.objects.get(name="node-10"), verb="drain", actor="root")  # meanwhile
    stale = client.post("/fleet/bulk/confirm/", {"verb": "drain", "fingerprint": p.fingerprint,
                                                 "hosts": list(p.host_ids)}, HTTP_HX_REQUEST="true")
    assert stale.status_code == 409 and stale["HX-Retarget"] == "#bulk-preview"
    assert "changed since the preview" in stale.content.decode()
    assert set(Host.objects.filter(admin_state="draining").values_list("name", flat=True)) == {"node-10"}


def test_bulk_actions_are_for_admins_and_check_their_input(fleet: Any) -> None:
    assert fleet["member"].post("/fleet/bulk/preview/", _drain_form()).status_code == 403
    assert fleet["member"].post("/fleet/bulk/confirm/", _drain_form()).status_code == 403
    bad = fleet["admin"].post("/fleet/bulk/preview/", _drain_form(verb="reboot"), HTTP_HX_REQUEST="true")
    assert bad.status_code == 422 and "Pick an action" in bad.content.decode()
    none = fleet["admin"].post("/fleet/bulk/preview/", {"verb": "cordon", "scope": "selected", "hosts": ["x"]},
                               HTTP_HX_REQUEST="true")
    assert none.status_code == 422 and "No hosts picked" in none.content.decode()
    assert fleet["admin"].get("/fleet/bulk/preview/").status_code == 405


def test_hosts_bulk_api_previews_then_cordons(fleet: Any, api: Any) -> None:
    from django.contrib.auth import get_user_model

    root = api(get_user_model().objects.get(username="root"))
    dry = root.post("/api/v1/hosts/bulk/", {"action": "cordon", "filter": {"q": "node-1"}, "dry_run": True},
                    format="json")
    assert dry.status_code == 200, dry.content[:300]
    body = dry.json()
    assert body["dry_run"] is True and [h["name"] for h in body["hosts"]] == ["node-1", "node-10", "node-11"]
    assert not Host.objects.filter(admin_state="cordoned").exists()
    done = root.post("/api/v1/hosts/bulk/", {"action": "cordon", "hosts": ["node-1", "node-10", "node-11"],
                                             "fingerprint": body["fingerprint"]}, format="json")
    assert done.status_code == 200, done.content[:300]
    assert done.json()["changed"] == ["node-1", "node-10", "node-11"]
    assert Host.objects.filter(admin_state="cordoned").count() == 3
    stale = root.post("/api/v1/hosts/bulk/", {"action": "cordon", "hosts": ["node-1"],
                                              "fingerprint": body["fingerprint"]}, format="json")
    assert stale.status_code == 409 and stale.json()["code"] == "preview_stale"


@pytest.mark.parametrize("payload, field", [
    ({"action": "reboot", "hosts": ["node-1"]}, "action"),
    ({"action": "drain"}, "hosts"),
    ({"action": "drain", "hosts": ["node-1"], "filter": {"q": "node"}}, "hosts"),
    ({"action": "drain", "hosts": ["node-99", "12345678"]}, "hosts"),
    ({"action": "drain", "filter": {"pool": "nope"}}, "filter"),
    ({"action": "drain", "filter": {"q": "zzz"}}, "filter"),
])
def test_hosts_bulk_api_refuses_bad_input_with_json(fleet: Any, api: Any, payload: dict[str, Any],
                                                    field: str) -> None:
    from django.contrib.auth import get_user_model

    response = api(get_user_model().objects.get(username="root")).post("/api/v1/hosts/bulk/", payload,
                                                                       format="json")
    assert response.status_code == 400, response.content[:300]
    body = json.loads(response.content)
    assert body["code"] and field in json.dumps(body.get("details", {}))
    assert not Host.objects.exclude(admin_state="").exists()


def test_hosts_bulk_api_is_for_admins(fleet: Any, api: Any) -> None:
    from django.contrib.auth import get_user_model

    ann = get_user_model().objects.get(username="ann")
    response = api(ann).post("/api/v1/hosts/bulk/", {"action": "drain", "hosts": ["node-1"]}, format="json")
    assert response.status_code == 403
