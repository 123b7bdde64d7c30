"""The allocation rules end to end: a two-team fleet configured with `apply`, leases requested
through the API, passes run by `schedule`."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command

from allocation.models import Lease

FLEET = """
pools: [{name: gpus}]
teams: [{name: a, weight: %(wa)s}, {name: b, weight: %(wb)s}]
quotas:
  - {team: a, pool: gpus, guaranteed: %(ga)s, limit: %(la)s}
  - {team: b, pool: gpus, guaranteed: %(gb)s, limit: %(lb)s}
priority_classes:
  - {name: high, value: 100, preemptible: false}
  - {name: default, value: 0}
  - {name: best-effort, value: -10, preemptible: true, min_runtime_s: %(minrt)s, grace_s: 30}
sources: [{name: sim, kind: simulated, pool: gpus, hosts: %(hosts)s, gpus_per_host: 8}]
"""


def two_teams(apply_yaml, make_user, api):
    """`build(**kw)`: the pool "gpus" of `hosts` x 8 GPUs, teams a and b (weights, guarantees,
    limits as given), three priority classes; returns API clients of ann (team a) and ben (b)."""
    def build(**kw):
        values = {"wa": 1, "wb": 1, "ga": 0, "gb": 0, "la": "null", "lb": "null", "minrt": 0, "hosts": 2} | kw
        apply_yaml(FLEET % values)
        return api(make_user("ann", teams=("a",))), api(make_user("ben", teams=("b",)))
    return build


def ask(client, n: int, gpus: int = 1, **body):
    ids = []
    for _ in range(n):
        r = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": gpus, **body}, format="json")
        assert r.status_code == 201, r.json()
        ids.append(r.json()["id"])
    return ids


def schedule() -> str:
    out = StringIO()
    call_command("schedule", stdout=out)
    return out.getvalue()


def held(team: str) -> int:
    """GPUs the team holds now (one row per active lease↔GPU link)."""
    return Lease.objects.filter(team__name=team, gpu_links__active=True).count()
