"""A lending limit end to end: quotas applied from a file, leases requested through the API,
passes run by `schedule`, the reason read back through the API."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db

# One host of 8: every GPU is b's guarantee, of which b lends 2 while it leaves it idle.
FLEET = """
pools: [{name: gpus}]
teams: [{name: a}, {name: b}]
quotas:
  - {team: a, pool: gpus, guaranteed: 0}
  - {team: b, pool: gpus, guaranteed: 8, lending_limit: 2}
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 8}]
"""

REASON = ("would borrow 4 GPUs above team a's guarantee 0 in pool gpus, but only 2 may be lent "
          "now: team b keeps 6 GPUs of its idle guarantee unlent (guaranteed 8, lending limit 2)")


def schedule() -> str:
    out = StringIO()
    call_command("schedule", stdout=out)
    return out.getvalue()


def ask(client, gpus: int) -> str:
    response = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": gpus}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def test_a_borrower_gets_what_an_idle_team_lends_and_waits_for_more(apply_yaml, make_user, api) -> None:
    apply_yaml(FLEET)
    ann, ben = api(make_user("ann", teams=("a",))), api(make_user("ben", teams=("b",)))

    four = ask(ann, 4)
    out = schedule()
    assert f"pending   {four} team=a #1: {REASON}" in out
    lease = ann.get(f"/api/v1/leases/{four}/").json()
    assert (lease["state"], lease["reason"]) == ("pending", REASON)

    two = ask(ann, 2)  # within what b lends: granted, while the larger one still waits
    assert f"granted   {two} team=a gpus=2" in schedule()
    granted = ann.get(f"/api/v1/leases/{two}/").json()
    assert granted["state"] == "granted" and granted["borrowed"] is True
    assert ann.get(f"/api/v1/leases/{four}/").json()["reason"] == REASON  # decided before that grant
    schedule()  # the next pass counts the grant: nothing more may be lent
    waiting = ann.get(f"/api/v1/leases/{four}/").json()
    assert waiting["state"] == "pending" and "but only 0 may be lent now: team b keeps 6 GPUs" in waiting["reason"]

    # b still reaches the guarantee it kept back, without preempting anyone.
    own = ask(ben, 6)
    out = schedule()
    assert f"granted   {own} team=b gpus=6" in out and "preempted 0" in out
    quota = ben.get("/api/v1/quotas/?team=b").json()["results"][0]
    assert (quota["lending_limit"], quota["used"], quota["borrowed"]) == (2, 6, 0)
