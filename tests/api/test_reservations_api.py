"""POST/GET reservations/ and reservations/{id}/cancel/: validation naming the field, admission
against capacity and the team's limit (409), who may reserve and cancel, and the audit trail."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from allocation.models import AuditEvent, Reservation

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus}]
teams: [{name: a}, {name: b}]
quotas:
  - {team: a, pool: gpus, guaranteed: 0, limit: 12}
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: gpus, hosts: 2, gpus_per_host: 8, model: "NVIDIA H100 80GB HBM3"}]
"""
URL = "/api/v1/reservations/"


@pytest.fixture
def clients(apply_yaml, make_user, api):
    apply_yaml(FLEET)
    return (api(make_user("ann", teams=("a",))), api(make_user("ben", teams=("b",))),
            api(make_user("root", admin=True)))


def body(hours: float = 1, length: float = 2, **kw):
    start = timezone.now() + timedelta(hours=hours)
    return {"pool": "gpus", "team": "a", "gpus": 4, "start": start.isoformat(),
            "end": (start + timedelta(hours=length)).isoformat()} | kw


def test_a_member_reserves_for_its_team_and_everyone_sees_it(clients) -> None:
    ann, ben, _ = clients
    r = ann.post(URL, body(model="h100"), format="json")
    assert r.status_code == 201, r.json()
    made = r.json()
    assert (made["pool"], made["team"], made["gpus"], made["model"], made["state"], made["created_by"]) == \
        ("gpus", "a", 4, "h100", "active", "ann")
    assert [x["id"] for x in ben.get(URL).json()["results"]] == [made["id"]]
    assert ben.get(URL, {"team": "b"}).json()["results"] == []
    assert ben.get(URL, {"state": "active", "pool": "gpus"}).json()["count"] == 1
    event = AuditEvent.objects.get(action="reservation.created")
    assert (event.actor, event.object_id) == ("ann", str(made["id"]))


@pytest.mark.parametrize(("change", "field"), [
    ({"gpus": 0}, "gpus"),
    ({"pool": "nope"}, "pool"),
    ({"team": "nope"}, "team"),
    ({"model": "A100"}, "model"),
    ({"start": "yesterday"}, "start"),
    ({"extra": 1}, "extra"),
])
def test_bad_input_is_a_400_naming_the_field(clients, change, field) -> None:
    ann, _, _ = clients
    r = ann.post(URL, body(**change), format="json")
    assert r.status_code == 400, r.json()
    assert r.json()["code"] in ("invalid", "unknown_field") and field in r.json()["details"]
    assert not Reservation.objects.exists()


def test_a_window_that_ends_before_it_starts_or_starts_in_the_past_is_refused(clients) -> None:
    ann, _, _ = clients
    backwards = body()
    backwards["end"], backwards["start"] = backwards["start"], backwards["end"]
    r = ann.post(URL, backwards, format="json")
    assert r.status_code == 400 and "end" in r.json()["details"]
    r = ann.post(URL, body(hours=-1), format="json")
    assert r.status_code == 400 and r.json()["details"] == {"start": ["is in the past"]}
    assert ann.post(URL, body(hours=-1 / 60), format="json").status_code == 201  # within the skew


def test_capacity_taken_by_overlapping_reservations_is_a_409(clients) -> None:
    ann, ben, _ = clients
    assert ben.post(URL, body(gpus=10, team="b"), format="json").status_code == 201
    r = ann.post(URL, body(hours=2, gpus=8), format="json")  # overlaps b's 10 of 16
    assert r.status_code == 409 and r.json()["code"] == "insufficient_capacity"
    assert "other reservations hold up to 10 of them in that window" in r.json()["message"]
    assert "(at most 6)" in r.json()["message"]
    assert ann.post(URL, body(hours=2, gpus=6), format="json").status_code == 201
    assert ann.post(URL, body(hours=4, gpus=8), format="json").status_code == 201  # after both windows


def test_the_teams_limit_caps_its_overlapping_reservations(clients) -> None:
    ann, _, _ = clients
    assert ann.post(URL, body(gpus=8), format="json").status_code == 201
    r = ann.post(URL, body(hours=1.5, gpus=5), format="json")
    assert r.status_code == 409 and r.json()["code"] == "over_limit"
    assert r.json()["message"].startswith("team a may hold at most 12 GPUs in pool gpus")
    assert ann.post(URL, body(hours=1.5, gpus=4), format="json").status_code == 201


def test_only_members_and_admins_reserve_and_cancel_for_a_team(clients) -> None:
    ann, ben, root = clients
    r = ben.post(URL, body(), format="json")
    assert r.status_code == 403 and r.json()["code"] == "not_a_member"
    made = root.post(URL, body(), format="json")
    assert made.status_code == 201 and made.json()["created_by"] == "root"
    cancel = f"{URL}{made.json()['id']}/cancel/"
    r = ben.post(cancel)
    assert r.status_code == 403 and r.json()["code"] == "not_a_member"
    r = ann.post(cancel)
    assert r.status_code == 200 and r.json()["state"] == "cancelled" and r.json()["cancelled_by"] == "ann"
    assert ann.post(cancel).json()["state"] == "cancelled"  # twice: unchanged
    assert AuditEvent.objects.filter(action="reservation.cancelled").count() == 1
    assert ann.post(f"{URL}999999/cancel/").status_code == 404


def test_a_cancelled_reservation_frees_its_capacity_and_an_ended_one_cannot_be_cancelled(clients) -> None:
    ann, ben, _ = clients
    big = ann.post(URL, body(gpus=12), format="json").json()
    assert ben.post(URL, body(gpus=8, team="b"), format="json").status_code == 409
    ann.post(f"{URL}{big['id']}/cancel/")
    assert ben.post(URL, body(gpus=8, team="b"), format="json").status_code == 201
    Reservation.objects.filter(team__name="b").update(start=timezone.now() - timedelta(hours=3),
                                                       end=timezone.now() - timedelta(hours=1))
    ended = ben.get(URL, {"state": "ended"}).json()["results"]
    assert [x["team"] for x in ended] == ["b"] and ended[0]["state"] == "ended"
    r = ben.post(f"{URL}{ended[0]['id']}/cancel/")
    assert r.status_code == 409 and r.json()["code"] == "reservation_ended"


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_creates_cannot_both_take_the_last_gpus(apply_yaml, make_user) -> None:
    from allocation.services.reservations import reservation_create
    from core.errors import Conflict

    apply_yaml(FLEET)
    users = [make_user("ann", teams=("a",)), make_user("ben", teams=("b",))]
    start = timezone.now() + timedelta(hours=1)
    barrier, outcomes = threading.Barrier(2), []

    def reserve(user, team) -> None:
        try:
            barrier.wait()
            reservation_create(user=user, pool="gpus", team=team, gpus=10, start=start,
                               end=start + timedelta(hours=1))
            outcomes.append("created")
        except Conflict as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=reserve, args=(u, t)) for u, t in zip(users, "ab", strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["created", "insufficient_capacity"]
    assert Reservation.objects.count() == 1
