"""`?dry_run=true` on the capacity-move endpoints (a GPU, a host, GPUs and hosts into a pool):
the answer is the preview of the dashboard's capacity page for the same move (who is preempted,
whether guarantees fit, which waiting leases could start, the fingerprint), and nothing in the
database changes."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from allocation.api.moves import move_answer
from allocation.services.leases import lease_create
from inventory.models import Gpu, Host, Pool

pytestmark = pytest.mark.django_db


def _host(name: str) -> Host:
    return Host.objects.get(name=name)


def _dashboard_preview(seeded: Any, form: dict[str, Any]) -> tuple[Any, str]:
    """What the capacity page previews for `form`: the preview it computed, and its HTML."""
    client = Client()
    client.force_login(seeded.users["root"])
    response = client.post("/capacity/preview/", form, HTTP_HX_REQUEST="true")
    assert response.status_code == 200, response.content[:300]
    return response.context["preview"], response.content.decode()


def test_a_host_drain_dry_run_names_the_preempted_lease_and_changes_nothing(
        seeded: Any, api: Any, database_rows: Any) -> None:
    research = seeded.leases["research"]
    node = _host(research.host.name)
    before = database_rows()
    response = api(seeded.users["root"]).post(f"/api/v1/hosts/{node.pk}/move/?dry_run=true",
                                              {"pool": "inference", "mode": "drain"}, format="json")
    assert response.status_code == 200, response.content[:300]
    assert database_rows() == before
    answer = response.json()
    assert answer["dry_run"] is True and answer["moved"] == 0 and answer["can_confirm"] is True
    assert [(i["lease"], i["outcome"]) for i in answer["preempted"]] == [(str(research.pk), "preempted")]
    assert answer["fence_hosts"] == [{"id": node.pk, "name": node.name}]
    assert answer["guarantees_ok"] is True  # training keeps 24 GPUs for its 16 guaranteed
    assert len(answer["gpus"]) == answer["units"] == 8

    preview, html = _dashboard_preview(seeded, {"pool": "inference", "hosts": [node.pk], "mode": "drain"})
    assert answer == move_answer(preview, dry_run=True)
    assert answer["fingerprint"] == preview.fingerprint
    assert f'data-lease="{research.pk}" data-outcome="preempted"' in html


def test_moving_away_more_than_the_guarantees_leave_says_they_no_longer_fit(
        seeded: Any, api: Any, database_rows: Any) -> None:
    hosts = [*sorted(_host(seeded.leases[n].host.name).pk for n in ("vision", "research")), _host("demo-node-3").pk]
    before = database_rows()
    response = api(seeded.users["root"]).post("/api/v1/pools/inference/move/?dry_run=true",
                                              {"hosts": hosts, "mode": "keep"}, format="json")
    assert response.status_code == 200, response.content[:300]
    assert database_rows() == before
    answer = response.json()
    assert answer["guarantees_ok"] is False
    training = next(p for p in answer["pools"] if p["pool"] == "training")
    assert (training["capacity_before"], training["capacity_after"], training["shortfall"]) == (32, 8, 8)
    assert answer["preempted"] == []  # keep: the leases run on, their hosts cordoned
    assert {i["outcome"] for i in answer["leases"]} == {"over_limit", "keeps_running"}

    preview, html = _dashboard_preview(seeded, {"pool": "inference", "hosts": hosts, "mode": "keep"})
    assert answer == move_answer(preview, dry_run=True)
    assert "no: 8 short" in html


def test_a_free_host_dry_run_names_the_waiting_lease_that_could_start(
        seeded: Any, api: Any, database_rows: Any) -> None:
    waiting = lease_create(user=seeded.users["dave"], pool=Pool.objects.get(name="inference"), gpus=4,
                           ttl_seconds=60)[0]
    free = _host("demo-node-3")
    before = database_rows()
    response = api(seeded.users["root"]).post(f"/api/v1/hosts/{free.pk}/move/?dry_run=true",
                                              {"pool": "inference"}, format="json")
    assert response.status_code == 200, response.content[:300]
    assert database_rows() == before
    answer = response.json()
    assert [(i["lease"], i["outcome"]) for i in answer["could_start"]] == [(str(waiting.pk), "granted_next_pass")]
    assert answer["preempted"] == [] and answer["fence_hosts"] == [] and answer["guarantees_ok"] is True

    preview, _ = _dashboard_preview(seeded, {"pool": "inference", "hosts": [free.pk], "mode": "keep"})
    assert answer == move_answer(preview, dry_run=True)


def test_a_pool_move_dry_run_of_gpus_and_hosts_matches_the_dashboard(seeded: Any, api: Any,
                                                                     database_rows: Any) -> None:
    node = _host(seeded.leases["nlp"].host.name)
    loose = Gpu.objects.filter(host=_host("demo-node-3")).order_by("index")[:2]
    body = {"hosts": [node.pk], "gpus": [g.uuid for g in loose], "mode": "drain"}
    before = database_rows()
    answer = api(seeded.users["root"]).post("/api/v1/pools/inference/move/?dry_run=true", body,
                                            format="json").json()
    assert database_rows() == before
    assert answer["units"] == 10 and set(answer["gpus"]) >= {g.uuid for g in loose}
    preview, _ = _dashboard_preview(seeded, {"pool": "inference", "hosts": [node.pk],
                                             "gpus": [g.pk for g in loose], "mode": "drain"})
    assert answer == move_answer(preview, dry_run=True)


def test_a_gpu_dry_run_previews_a_held_gpu_and_leaves_it_where_it_is(seeded: Any, api: Any,
                                                                    database_rows: Any) -> None:
    lease = seeded.leases["vision"]
    gpu = Gpu.objects.filter(host=lease.host).order_by("index").first()
    assert gpu is not None
    before = database_rows()
    response = api(seeded.users["root"]).post(f"/api/v1/gpus/{gpu.uuid}/move/?dry_run=true",
                                              {"pool": "inference"}, format="json")
    assert response.status_code == 200, response.content[:300]
    assert database_rows() == before
    answer = response.json()
    assert answer["dry_run"] is True and answer["gpus"] == [gpu.uuid] and answer["blocked"] == []
    [impact] = [i for i in answer["leases"] if i["gpus_moved"]]
    assert (impact["lease"], impact["outcome"]) == (str(lease.pk), "keeps_running")
    assert any("keeps them until it ends" in note for note in answer["notes"])


def test_a_dry_run_needs_a_boolean_and_a_pool_admin(seeded: Any, api: Any, database_rows: Any) -> None:
    gpu = Gpu.objects.filter(host=_host("demo-node-3")).first()
    assert gpu is not None
    before = database_rows()
    member = api(seeded.users["alice"]).post(f"/api/v1/gpus/{gpu.uuid}/move/?dry_run=true", {"pool": "inference"},
                                             format="json")
    assert member.status_code == 403
    bad = api(seeded.users["root"]).post(f"/api/v1/gpus/{gpu.uuid}/move/?dry_run=maybe", {"pool": "inference"},
                                         format="json")
    assert bad.status_code == 400 and "dry_run" in bad.json()["details"]
    assert database_rows() == before
