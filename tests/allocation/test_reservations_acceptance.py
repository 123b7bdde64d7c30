"""An advance reservation end to end: reserved through the API, leases requested through the API,
passes run by `schedule`, reasons read back through the API."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus}]
teams: [{name: a}, {name: b}]
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: gpus, hosts: 2, gpus_per_host: 8}]
"""


def schedule() -> str:
    out = StringIO()
    call_command("schedule", stdout=out)
    return out.getvalue()


def ask(client, gpus: int, **body) -> str:
    r = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": gpus, "same_host": False, **body}, format="json")
    assert r.status_code == 201, r.json()
    return r.json()["id"]


def reserve(client, gpus: int, start, hours: float = 2) -> int:
    r = client.post("/api/v1/reservations/", {"pool": "gpus", "team": "a", "gpus": gpus,
                                              "start": start.isoformat(),
                                              "end": (start + timedelta(hours=hours)).isoformat()}, format="json")
    assert r.status_code == 201, r.json()
    return r.json()["id"]


def lease(client, lease_id: str) -> dict:
    return client.get(f"/api/v1/leases/{lease_id}/").json()


def test_a_reservation_keeps_long_leases_off_before_its_start_and_serves_its_team_in_its_window(
        apply_yaml, make_user, api) -> None:
    apply_yaml(FLEET)
    ann, ben = api(make_user("ann", teams=("a",))), api(make_user("ben", teams=("b",)))
    later = reserve(ann, 12, timezone.now() + timedelta(hours=1))

    long = ask(ben, 8, ttl_seconds=7200)  # would still run at the start: 16 - 8 < 12
    short = ask(ben, 4, ttl_seconds=1800)  # ends before it: backfills
    out = schedule()
    assert f"granted   {short} team=b gpus=4" in out
    waiting = lease(ben, long)
    assert waiting["state"] == "pending"
    assert f"are reserved for team a (reservation {later}, 12 GPUs from " in waiting["reason"]

    # Cancelled: nothing is held any more.
    assert ann.post(f"/api/v1/reservations/{later}/cancel/").json()["state"] == "cancelled"
    assert f"granted   {long} team=b gpus=8" in schedule()
    ben.post(f"/api/v1/leases/{long}/release/")
    ben.post(f"/api/v1/leases/{short}/release/")

    # In its window: b keeps off the reserved GPUs, a's request is granted from them.
    now_on = reserve(ann, 8, timezone.now())
    greedy = ask(ben, 10)
    schedule()
    assert lease(ben, greedy)["state"] == "pending"
    assert f"reservation {now_on}, 8 GPUs until " in lease(ben, greedy)["reason"]
    mine = ask(ann, 8)
    fits = ask(ben, 8)  # what is not reserved is everyone's
    out = schedule()
    assert f"granted   {mine} team=a gpus=8" in out and f"granted   {fits} team=b gpus=8" in out
