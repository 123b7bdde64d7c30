"""Topology through the API (acceptance): a `required` rack gang waits rather than span racks
(pending code `topology`), a 4-GPU lease on a DGX-like host (two 4-GPU NVLink islands) lands in
one island, the field shows in the lease JSON, and an unknown level is a 400 with its code."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import run_pass
from inventory.models import Gpu, Host

pytestmark = pytest.mark.django_db

CONFIG = """\
topology: [rack]
pools: [{name: p}]
teams: [{name: t, members: [ann]}]
quotas: [{team: t, pool: p, guaranteed: 0}]
sources: [{name: sim, kind: simulated, pool: p, hosts: 4, gpus_per_host: 8}]
"""


@pytest.fixture
def fleet(apply_yaml: Any, make_user: Any, api: Any) -> Any:
    ann = make_user("ann")
    apply_yaml(CONFIG)
    hosts = list(Host.objects.order_by("name"))
    assert len(hosts) == 4
    for i, host in enumerate(hosts):  # racks of two hosts
        host.labels = {**host.labels, "rack": f"r{i // 2}"}
        host.save(update_fields=["labels"])
    return api(ann)


def _lease(client: Any, lease_id: str) -> dict[str, Any]:
    return client.get(f"/api/v1/leases/{lease_id}/").json()


def _racks(lease: dict[str, Any]) -> set[str]:
    hosts = Gpu.objects.filter(uuid__in=lease["gpus"]).values_list("host__labels", flat=True)
    return {labels["rack"] for labels in hosts}


def _pin(client: Any, host: str, gpus: int) -> str:
    response = client.post("/api/v1/leases/", {"pool": "p", "gpus": gpus, "selector": {"host": host}}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def test_a_required_rack_gang_waits_rather_than_span_racks(fleet: Any) -> None:
    names = list(Host.objects.order_by("name").values_list("name", flat=True))
    held = [_pin(fleet, names[0], 4), _pin(fleet, names[2], 4)]  # 12 free in each rack, 24 in all
    run_pass()
    assert {_lease(fleet, lease)["state"] for lease in held} == {"granted"}
    body = {"pool": "p", "gpus": 16, "same_host": False, "topology": {"within": "rack", "mode": "required"}}
    created = fleet.post("/api/v1/leases/", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["topology"] == {"within": "rack", "mode": "required"}
    run_pass()
    waiting = _lease(fleet, created.json()["id"])
    assert (waiting["state"], waiting["pending_code"]) == ("pending", "topology")
    assert "not within one rack" in waiting["reason"]
    assert [lease["id"] for lease in fleet.get("/api/v1/leases/?pending_code=topology").json()["results"]] == [
        waiting["id"]]
    # Once a rack has room, it is granted there, in one rack.
    assert fleet.post(f"/api/v1/leases/{held[0]}/release/", {}, format="json").status_code == 200
    run_pass()
    granted = _lease(fleet, waiting["id"])
    assert granted["state"] == "granted" and _racks(granted) == {"r0"}


def test_a_preferred_rack_gang_spans_racks_when_no_rack_holds_it(fleet: Any) -> None:
    body = {"pool": "p", "gpus": 20, "same_host": False, "topology": {"within": "rack"}}
    created = fleet.post("/api/v1/leases/", body, format="json").json()
    assert created["topology"] == {"within": "rack", "mode": "preferred"}
    run_pass()
    lease = _lease(fleet, created["id"])
    assert lease["state"] == "granted" and _racks(lease) == {"r0", "r1"}


def test_a_four_gpu_lease_on_a_dgx_like_host_lands_in_one_nvlink_island(fleet: Any) -> None:
    host = Host.objects.order_by("name").first()
    assert host is not None
    Host.objects.exclude(pk=host.pk).update(state="cordoned")
    for gpu in Gpu.objects.filter(host=host):
        gpu.nvlink_island = f"nvl{gpu.index // 4}"
        gpu.save(update_fields=["nvlink_island"])
    one = fleet.post("/api/v1/leases/", {"pool": "p", "gpus": 1}, format="json").json()["id"]
    run_pass()
    four = fleet.post("/api/v1/leases/", {"pool": "p", "gpus": 4}, format="json").json()["id"]
    run_pass()
    lease = _lease(fleet, four)
    assert lease["state"] == "granted", lease
    islands = set(Gpu.objects.filter(uuid__in=lease["gpus"]).values_list("nvlink_island", flat=True))
    assert len(islands) == 1
    single = set(Gpu.objects.filter(uuid__in=_lease(fleet, one)["gpus"]).values_list("nvlink_island", flat=True))
    assert single != islands  # the 1-GPU lease's island was broken; the 4 took the whole other one


@pytest.mark.parametrize(("topology", "code"), [
    ({"within": "row"}, "unknown_topology_level"),
    ({"within": "rack", "mode": "maybe"}, "invalid"),
    ({"mode": "required"}, "invalid"),
    ({"within": "rack", "extra": 1}, "unknown_field"),
])
def test_a_bad_topology_is_a_400_with_a_code(fleet: Any, topology: dict[str, Any], code: str) -> None:
    response = fleet.post("/api/v1/leases/", {"pool": "p", "gpus": 2, "topology": topology}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert "topology" in response.json()["message"]


def test_a_level_named_by_its_short_name_is_stored_as_the_configured_key(
        apply_yaml: Any, make_user: Any, api: Any) -> None:
    ann = make_user("ann")
    apply_yaml(CONFIG.replace("topology: [rack]", "topology: [topology.kubernetes.io/zone, rack]"))
    client = api(ann)
    response = client.post("/api/v1/leases/", {"pool": "p", "gpus": 2, "topology": {"within": "zone"}},
                           format="json")
    assert response.status_code == 201, response.content
    assert response.json()["topology"] == {"within": "topology.kubernetes.io/zone", "mode": "preferred"}
