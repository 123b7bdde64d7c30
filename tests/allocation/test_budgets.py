"""GPU-hour budgets on PostgreSQL: 80% and 100% warnings once per period per threshold, period
rollover, pool-scoped against all-pools budgets, and what a spent budget does to a new lease
(`block_new`: a 403 `budget_exhausted`; `lower_priority`: the lowest class, saying why; `warn`:
nothing), at the cost of one indexed query on the create path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import AuditEvent, Budget, Lease, LeaseUsage
from allocation.policy.metering import period_start
from allocation.services.budgets import budget_statuses, budgets_refresh

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus}, {name: spare}]
teams: [{name: a}, {name: b}]
priority_classes:
  - {name: default, value: 0}
  - {name: scavenger, value: -20, preemptible: true}
  - {name: high, value: 100}
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: 2, gpus_per_host: 4}
  - {name: sim-spare, kind: simulated, pool: spare, hosts: 1, gpus_per_host: 4}
"""
NOW = datetime(2026, 11, 18, 12, 0, tzinfo=UTC)  # a Wednesday, mid-month, mid-quarter


@pytest.fixture
def ann(apply_yaml: Any, make_user: Any, api: Any) -> Any:
    apply_yaml(FLEET)
    return api(make_user("ann", teams=("a",)))


def _budgets(apply_yaml: Any, *lines: str) -> None:
    apply_yaml("budgets:\n" + "".join(f"  - {line}\n" for line in lines), discover=False)


def _running(client: Any, gpus: int, *, since: datetime, pool: str = "gpus") -> str:
    """A granted lease whose meter started at `since`."""
    lease = client.post("/api/v1/leases/", {"pool": pool, "gpus": gpus}, format="json").json()
    run_pass()
    LeaseUsage.objects.filter(lease_id=lease["id"]).update(started_at=since)
    return str(lease["id"])


def _warnings() -> list[tuple[int, str]]:
    return [(e.data["threshold_pct"], e.data["period"]) for e in
            AuditEvent.objects.filter(action="budget.warning").order_by("at", "id")]


def _spend(hours: float, *, action: str = "block_new", pool: str | None = None) -> None:
    """Set the stored standing of the team's budgets as spent `hours` just now (this period)."""
    now = timezone.now()
    qs = Budget.objects.filter(action=action)
    if pool is not None:
        qs = qs.filter(pool__name=pool)
    for budget in qs:
        Budget.objects.filter(pk=budget.pk).update(period_start=period_start(budget.period, now),
                                                   used_gpu_hours=hours, held_gpu_equiv=0, used_as_of=now)


def test_a_team_is_warned_at_80_and_at_100_percent_once_each_per_period(ann, apply_yaml) -> None:
    _budgets(apply_yaml, "{team: a, gpu_hours: 10, period: month}")
    lease_id = _running(ann, 2, since=NOW - timedelta(hours=3))
    assert budgets_refresh(now=NOW)["warned"] == 0  # 6 of 10: 60%
    assert budgets_refresh(now=NOW + timedelta(hours=1))["warned"] == 1  # 8 of 10
    assert budgets_refresh(now=NOW + timedelta(hours=1, minutes=30))["warned"] == 0  # 9: warned already
    assert budgets_refresh(now=NOW + timedelta(hours=2))["warned"] == 1  # 10 of 10
    assert budgets_refresh(now=NOW + timedelta(hours=5))["warned"] == 0
    assert _warnings() == [(80, "month"), (100, "month")]
    event = AuditEvent.objects.filter(action="budget.warning").order_by("-at", "-id").first()
    assert event is not None and "team a used 10.0 of 10 GPU-hours of its monthly budget" in event.message
    assert event.data["resets_at"] == "2026-12-01T00:00:00+00:00"
    assert LeaseUsage.objects.get(lease_id=lease_id).ended_at is None


def test_reaching_100_percent_at_once_warns_of_100_only(ann, apply_yaml) -> None:
    _budgets(apply_yaml, "{team: a, gpu_hours: 10, period: week}")
    _running(ann, 4, since=NOW - timedelta(hours=5))
    assert budgets_refresh(now=NOW)["warned"] == 1
    assert _warnings() == [(100, "week")]


def test_a_new_period_starts_from_nothing_and_warns_again(ann, apply_yaml) -> None:
    _budgets(apply_yaml, "{team: a, gpu_hours: 10, period: month}")
    _running(ann, 2, since=NOW - timedelta(hours=6))
    budgets_refresh(now=NOW)
    december = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
    assert budgets_refresh(now=december)["warned"] == 0
    budget = Budget.objects.get()
    assert budget.period_start == datetime(2026, 12, 1, tzinfo=UTC)
    assert budget.used_gpu_hours == pytest.approx(2.0, abs=1e-6)  # only December's hour
    [status] = budget_statuses(now=december + timedelta(hours=1))
    assert status.used_gpu_hours == pytest.approx(4.0, abs=1e-6)  # held GPUs keep adding
    assert budgets_refresh(now=december + timedelta(hours=3))["warned"] == 1  # 8 of 10 in December
    assert _warnings() == [(100, "month"), (80, "month")]


def test_an_estimate_across_a_rollover_counts_only_the_new_period(ann, apply_yaml) -> None:
    _budgets(apply_yaml, "{team: a, gpu_hours: 10, period: week}")
    _running(ann, 3, since=NOW - timedelta(hours=1))
    budgets_refresh(now=NOW)
    monday = datetime(2026, 11, 23, 2, 0, tzinfo=UTC)
    [status] = budget_statuses(now=monday)
    assert status.used_gpu_hours == pytest.approx(3 * 2)  # held since Monday 00:00 only
    assert status.resets_at == datetime(2026, 11, 30, tzinfo=UTC)


def test_a_pool_budget_counts_its_pool_and_an_all_pools_budget_counts_every_pool(ann, apply_yaml) -> None:
    _budgets(apply_yaml, "{team: a, pool: gpus, gpu_hours: 100, period: month}",
             "{team: a, gpu_hours: 100, period: month}")
    _running(ann, 2, since=NOW - timedelta(hours=10))
    _running(ann, 4, since=NOW - timedelta(hours=5), pool="spare")
    budgets_refresh(now=NOW)
    used = {b.pool_id is None: b.used_gpu_hours for b in Budget.objects.all()}
    assert used[False] == pytest.approx(20.0) and used[True] == pytest.approx(40.0)
    assert Budget.objects.get(pool__isnull=False).held_gpu_equiv == 2.0


def test_block_new_refuses_a_lease_with_403_budget_exhausted_saying_which_and_when(ann, apply_yaml) -> None:
    _budgets(apply_yaml, "{team: a, pool: gpus, gpu_hours: 10, period: week, action: block_new}")
    _spend(10.5)
    response = ann.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json")
    assert response.status_code == 403
    body = response.json()
    assert body["code"] == "budget_exhausted"
    assert "team a used 10.5 of 10 GPU-hours of its weekly budget in pool gpus" in body["message"]
    details = body["details"]
    assert details["used_gpu_hours"] == 10.5 and details["gpu_hours"] == 10
    assert details["budget"] == {"team": "a", "pool": "gpus", "period": "week", "gpu_hours": 10, "action": "block_new"}
    now = timezone.now()
    assert datetime.fromisoformat(details["resets_at"]) == period_start("week", now) + timedelta(days=7)
    assert not Lease.objects.exists()
    # Another pool is not this budget's: leases there go on.
    assert ann.post("/api/v1/leases/", {"pool": "spare", "gpus": 1}, format="json").status_code == 201


def test_a_budget_below_its_limit_or_of_another_team_lets_leases_be(ann, apply_yaml, make_user, api) -> None:
    _budgets(apply_yaml, "{team: a, gpu_hours: 10, period: month, action: block_new}",
             "{team: b, gpu_hours: 10, period: month, action: warn}")
    _spend(9.9)
    assert ann.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json").status_code == 201
    _spend(50, action="warn")
    bob = api(make_user("bob", teams=("b",)))
    created = bob.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json")
    assert created.status_code == 201 and created.json()["priority_class"] == "default"


def test_a_replayed_request_gets_its_lease_even_once_the_budget_is_spent(ann, apply_yaml) -> None:
    _budgets(apply_yaml, "{team: a, gpu_hours: 10, period: month, action: block_new}")
    first = ann.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    _spend(11)
    again = ann.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert again.status_code in (200, 201) and again.json()["id"] == first.json()["id"]


def test_lower_priority_demotes_new_leases_to_the_lowest_class_and_says_why(ann, apply_yaml) -> None:
    _budgets(apply_yaml, "{team: a, gpu_hours: 10, period: quarter, action: lower_priority}")
    _spend(12, action="lower_priority")
    created = ann.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1, "priority_class": "high"}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert body["priority_class"] == "scavenger"
    assert "priority lowered to scavenger: team a used 12.0 of 10 GPU-hours of its quarterly budget" in body["reason"]
    lease = Lease.objects.get(pk=body["id"])
    assert lease.priority_class.name == "scavenger"
    event = AuditEvent.objects.get(lease=lease, action="lease.created")
    assert event.data["demoted"]["from"] == "high" and event.data["demoted"]["to"] == "scavenger"


def test_the_create_path_pays_one_indexed_query_for_a_team_with_budgets_and_none_without(
        ann, apply_yaml, make_user, api) -> None:
    def count(client: Any) -> int:
        client.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json")  # warm: token cached
        with CaptureQueriesContext(connection) as ctx:
            assert client.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json").status_code == 201
        return len(ctx.captured_queries)

    without = count(ann)
    _budgets(apply_yaml, "{team: a, gpu_hours: 1000, period: month, action: block_new}")
    with_budget = count(ann)
    assert with_budget == without + 1
    bob = api(make_user("bob", teams=("b",)))
    assert count(bob) == without  # b has no budget: nothing more
    with connection.cursor() as cur:
        cur.execute("EXPLAIN SELECT * FROM allocation_budget WHERE team_id = 1 AND (pool_id IS NULL OR pool_id = 1)")
        plan = " ".join(row[0] for row in cur.fetchall())
    assert "allocation_budget" in plan


def test_apply_measures_a_new_budget_at_once(ann, apply_yaml) -> None:
    lease_id = _running(ann, 2, since=timezone.now() - timedelta(minutes=30))
    _budgets(apply_yaml, "{team: a, gpu_hours: 10, period: month}")
    budget = Budget.objects.get()
    assert budget.used_as_of is not None and budget.period_start is not None and budget.held_gpu_equiv == 2.0
    started = LeaseUsage.objects.get(lease_id=lease_id).started_at
    expected = 2 * (budget.used_as_of - max(started, budget.period_start)).total_seconds() / 3600
    assert budget.used_gpu_hours == pytest.approx(expected, abs=1e-3)
