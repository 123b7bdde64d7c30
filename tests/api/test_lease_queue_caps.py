"""A queue no team can flood: `pools[].queue_caps` caps each team's pending leases and pending
GPUs per pool; a lease over a cap is a 429 `queue_full` that names the cap and the queue, and
many creators at once (each on its own database connection) never take a queue past its cap."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection

from allocation.engine import run_pass
from allocation.models import Lease

FLEET = """
pools: [{name: gpus, queue_caps: {pending_leases_per_team: 3, pending_gpus_per_team: 10}}, {name: open}]
teams: [{name: a, members: [ann, amy]}, {name: b, members: [ben]}]
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 8}
  - {name: sim2, kind: simulated, pool: open, hosts: 1, gpus_per_host: 8, host_prefix: open}
"""


@pytest.fixture
def fleet(apply_yaml: Any, make_user: Any) -> dict[str, Any]:
    users = {name: make_user(name, teams=(team,)) for name, team in (("ann", "a"), ("amy", "a"), ("ben", "b"))}
    apply_yaml(FLEET)
    return users


def _post(client: Any, gpus: int = 1, pool: str = "gpus", **headers: str) -> Any:
    return client.post("/api/v1/leases/", {"pool": pool, "gpus": gpus}, format="json", **headers)


@pytest.mark.django_db
def test_a_lease_over_the_pending_leases_cap_is_a_429_naming_the_cap(fleet: Any, api: Any) -> None:
    ann, amy = api(fleet["ann"]), api(fleet["amy"])
    # 8 GPUs held first, so that what follows waits.
    assert _post(ann, 8).status_code == 201
    run_pass()
    assert [_post(c).status_code for c in (ann, amy, ann)] == [201, 201, 201]
    full = _post(amy)
    assert full.status_code == 429
    body = full.json()
    assert body["code"] == "queue_full"
    assert body["message"].startswith("team a already has 3 pending leases in pool gpus, its cap "
                                      "(queue_caps.pending_leases_per_team: 3)")
    assert body["details"] == {"cap": "pending_leases_per_team", "limit": 3, "team": "a", "pool": "gpus",
                               "pending_leases": 3, "pending_gpus": 3, "gpus": 1}
    # The cap is per team and per pool; reads are not affected.
    assert _post(api(fleet["ben"])).status_code == 201
    assert _post(amy, pool="open").status_code == 201
    assert ann.get("/api/v1/leases/").status_code == 200
    # A lease leaving the queue makes room.
    waiting = Lease.objects.filter(team__name="a", pool__name="gpus", state="pending").first()
    assert waiting is not None
    assert ann.post(f"/api/v1/leases/{waiting.pk}/release/", {}, format="json").status_code == 200
    assert _post(amy).status_code == 201


@pytest.mark.django_db
def test_a_lease_that_would_take_the_queue_over_its_gpus_cap_is_a_429(fleet: Any, api: Any) -> None:
    ann = api(fleet["ann"])
    assert _post(ann, 8).status_code == 201
    run_pass()
    assert _post(ann, 6).status_code == 201
    full = _post(ann, 5)
    assert full.status_code == 429 and full.json()["details"]["cap"] == "pending_gpus_per_team"
    assert "ask for 6 GPUs; 5 more would go over its cap (queue_caps.pending_gpus_per_team: 10)" in \
        full.json()["message"]
    assert _post(ann, 4).status_code == 201  # exactly at the cap


@pytest.mark.django_db
def test_a_replay_of_an_accepted_lease_is_answered_even_when_the_queue_is_full(fleet: Any, api: Any) -> None:
    ann = api(fleet["ann"])
    assert _post(ann, 8).status_code == 201
    run_pass()
    first = _post(ann, HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == 201
    assert [_post(ann).status_code for _ in range(3)] == [201, 201, 429]
    again = _post(ann, HTTP_IDEMPOTENCY_KEY="k1")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]


@pytest.mark.django_db(transaction=True)
def test_many_creators_at_once_never_take_a_queue_past_its_cap(apply_yaml: Any, make_user: Any) -> None:
    from allocation.services.leases import lease_create
    from core.errors import DomainError

    users = [make_user(f"u{i}", teams=("a",)) for i in range(12)]
    apply_yaml(FLEET.replace("pending_leases_per_team: 3, pending_gpus_per_team: 10",
                             "pending_leases_per_team: 25"))
    barrier, outcomes, lock = threading.Barrier(len(users)), Counter[str](), threading.Lock()

    def create(user: Any) -> None:
        try:
            barrier.wait()
            for _ in range(6):
                try:
                    lease_create(user=user, pool="gpus", gpus=1)
                    code = "created"
                except DomainError as exc:
                    code = exc.code
                with lock:
                    outcomes[code] += 1
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(user,)) for user in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == {"created": 25, "queue_full": 12 * 6 - 25}
    assert Lease.objects.filter(team__name="a", pool__name="gpus", state="pending").count() == 25
