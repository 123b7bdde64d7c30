"""Hierarchical quotas end to end: departments and teams applied from a file, leases requested
through the API, passes run by `schedule` (no Celery), the tree read back through the API."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db

# Department research (guaranteed 8, or as given) over ml and vision (4 each); department ops (4)
# over web. Three hosts of 4 GPUs.
FLEET = """
pools: [{name: gpus}]
teams:
  - {name: research}
  - {name: ml, parent: research}
  - {name: vision, parent: research}
  - {name: ops}
  - {name: web, parent: ops}
quotas:
  - {team: research, pool: gpus, guaranteed: %(g)s, limit: %(research_limit)s}
  - {team: ml, pool: gpus, guaranteed: %(child)s}
  - {team: vision, pool: gpus, guaranteed: %(child)s}
  - {team: ops, pool: gpus, guaranteed: 4}
  - {team: web, pool: gpus, guaranteed: 4}
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: gpus, hosts: 3, gpus_per_host: 4}]
"""


def schedule() -> str:
    out = StringIO()
    call_command("schedule", stdout=out)
    return out.getvalue()


def ask(client, gpus: int) -> str:
    response = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": gpus, "same_host": False},
                           format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def state(client, lease: str) -> dict:
    return client.get(f"/api/v1/leases/{lease}/").json()


def test_a_departments_idle_guarantee_goes_to_its_sibling_team_before_another_department(
        apply_yaml, make_user, api) -> None:
    apply_yaml(FLEET % {"g": 8, "child": 4, "research_limit": "null"})
    vic = api(make_user("vic", teams=("vision",)))
    wes = api(make_user("wes", teams=("web",)))
    admin = api(make_user("root", admin=True))
    vic_own = ask(vic, 4)
    wes_own = ask(wes, 4)
    schedule()
    assert state(vic, vic_own)["state"] == state(wes, wes_own)["state"] == "granted"
    # Both borrow 4 more: web asked first (flat, the older request would win the last 4 GPUs),
    # but ml's idle guarantee is lent within research first: to vision.
    wes_more = ask(wes, 4)
    vic_more = ask(vic, 4)
    schedule()
    assert state(vic, vic_more)["state"] == "granted" and state(vic, vic_more)["borrowed"] is True
    assert state(wes, wes_more)["state"] == "pending"
    teams = {t["name"]: t for t in admin.get("/api/v1/teams/").json()["results"]}
    assert teams["vision"]["parent"] == "research" and teams["vision"]["path"] == ["research", "vision"]
    assert teams["research"]["children"] == ["ml", "vision"] and teams["research"]["parent"] is None
    # A department holds no leases of its own.
    refused = admin.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1, "team": "research"}, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "not_a_leaf_team", refused.json()


def test_a_parent_limit_caps_its_teams_together(apply_yaml, make_user, api) -> None:
    apply_yaml(FLEET % {"g": 4, "child": 2, "research_limit": 6})
    vic = api(make_user("vic", teams=("vision",)))
    mia = api(make_user("mia", teams=("ml",)))
    first = ask(vic, 4)
    schedule()
    assert state(vic, first)["state"] == "granted"
    over = ask(mia, 4)  # free GPUs there, but research may hold only 6
    fits = ask(mia, 2)
    schedule()
    assert state(mia, fits)["state"] == "granted"
    waiting = state(mia, over)
    assert waiting["state"] == "pending"
    assert waiting["reason"] == ("department research (of team ml) at its limit 6 in pool gpus "
                                 "(its teams hold or await 6, asks for 4)")


def test_a_quota_patch_keeps_children_within_their_parent(apply_yaml, make_user, api) -> None:
    apply_yaml(FLEET % {"g": 8, "child": 4, "research_limit": "null"})
    admin = api(make_user("root", admin=True))
    quota = admin.get("/api/v1/quotas/?team=ml").json()["results"][0]
    response = admin.patch(f"/api/v1/quotas/{quota['id']}/", {"guaranteed": 5}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_quota"
    assert "add up to 9, above its own guarantee 8" in str(response.json())
    assert admin.patch(f"/api/v1/quotas/{quota['id']}/", {"guaranteed": 3}, format="json").status_code == 200
