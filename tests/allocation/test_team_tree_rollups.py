"""What rolls up the team tree: the dashboard's tree selector (held, guaranteed, limit,
borrowed per pool), a department's GPU-hour budget (its teams' use; its `block_new` refuses
their leases), and the usage report (`team=DEPARTMENT`, `group_by=department`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocation.economy.usage_tree import team_subtree_ids
from allocation.engine import run_pass
from allocation.models import Budget, LeaseUsage
from allocation.policy.metering import period_start
from allocation.selectors.teams_tree import flatten, team_tree
from allocation.services.budgets import budgets_refresh

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus}]
teams:
  - {name: research}
  - {name: ml, parent: research}
  - {name: vision, parent: research}
  - {name: ops}
quotas:
  - {team: research, pool: gpus, guaranteed: 4, limit: 7}
  - {team: ml, pool: gpus, guaranteed: 2}
  - {team: vision, pool: gpus, guaranteed: 2}
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: gpus, hosts: 2, gpus_per_host: 4}]
"""
NOW = datetime(2026, 11, 18, 12, 0, tzinfo=UTC)


@pytest.fixture
def clients(apply_yaml: Any, make_user: Any, api: Any) -> dict[str, Any]:
    apply_yaml(FLEET)
    return {"ml": api(make_user("mia", teams=("ml",))), "vision": api(make_user("vic", teams=("vision",))),
            "ops": api(make_user("oli", teams=("ops",))), "admin": api(make_user("root", admin=True))}


def _running(client: Any, gpus: int, *, since: datetime) -> str:
    lease = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": gpus, "same_host": False},
                        format="json").json()
    run_pass()
    LeaseUsage.objects.filter(lease_id=lease["id"]).update(started_at=since)
    return str(lease["id"])


def test_the_tree_selector_rolls_held_and_borrowed_up_to_the_department(clients) -> None:
    _running(clients["ml"], 3, since=NOW)  # 2 of its own guarantee, 1 borrowed
    _running(clients["vision"], 1, since=NOW)
    pending = clients["ml"].post("/api/v1/leases/", {"pool": "gpus", "gpus": 4}, format="json")
    assert pending.status_code == 201
    roots = {node.name: node for node in team_tree()}
    assert sorted(roots) == ["ops", "research"]
    research = roots["research"].pools["gpus"]
    assert (research.held, research.guaranteed, research.limit, research.borrowed, research.pending) == (4, 4, 7, 0, 4)
    ml = {n.name: n for n in flatten(roots.values())}["ml"]
    assert (ml.depth, ml.parent, ml.pools["gpus"].held, ml.pools["gpus"].borrowed) == (1, "research", 3, 1)
    assert [n.name for n in flatten(roots.values())] == ["ops", "research", "ml", "vision"]
    # A member sees their own team and the departments above it, not their siblings.
    from django.contrib.auth import get_user_model

    mine = team_tree(user=get_user_model().objects.get(username="mia"))
    assert [n.name for n in flatten(mine)] == ["research", "ml"]
    assert team_subtree_ids(roots["research"].id) == sorted(n.id for n in roots["research"].walk())


def test_a_department_budget_counts_its_teams_use_and_blocks_their_new_leases(clients, apply_yaml) -> None:
    apply_yaml("budgets:\n  - {team: research, gpu_hours: 10, period: month, action: block_new}\n",
               discover=False)
    _running(clients["ml"], 2, since=NOW - timedelta(hours=2))  # 4 GPU-hours
    _running(clients["vision"], 1, since=NOW - timedelta(hours=3))  # 3
    _running(clients["ops"], 2, since=NOW - timedelta(hours=5))  # not research's
    budgets_refresh(now=NOW)
    assert Budget.objects.get().used_gpu_hours == pytest.approx(7.0)
    now = timezone.now()
    Budget.objects.update(period_start=period_start("month", now), used_gpu_hours=11, used_as_of=now)
    refused = clients["vision"].post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "budget_exhausted"
    assert clients["ops"].post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json").status_code == 201


def test_usage_reports_a_department_with_its_teams(clients) -> None:
    _running(clients["ml"], 2, since=NOW - timedelta(hours=2))
    _running(clients["vision"], 1, since=NOW - timedelta(hours=3))
    _running(clients["ops"], 1, since=NOW - timedelta(hours=1))
    admin = clients["admin"]
    window = {"since": (NOW - timedelta(days=1)).isoformat(), "until": NOW.isoformat()}
    report = admin.get("/api/v1/usage/", {**window, "group_by": "department"}).json()
    rows = {r["department"]: r["gpu_hours"] for r in report["rows"]}
    assert rows == pytest.approx({"research": 7.0, "ops": 1.0})
    research = admin.get("/api/v1/usage/", {**window, "team": "research"}).json()
    assert {r["team"]: r["gpu_hours"] for r in research["rows"]} == pytest.approx({"ml": 4.0, "vision": 3.0})
