"""The chargeback report: `GET usage/` grouped by each of team, pool, model, user and day, cost
from prices, members scoped to their teams, bad input as a 400 with a code; `manage.py usage` as
JSON, CSV and a table; budgets in the team API."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from allocation.engine import run_pass
from allocation.models import LeaseUsage
from allocation.services.budgets import budgets_refresh

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus}, {name: spare}]
teams: [{name: a}, {name: b}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: 2, gpus_per_host: 4, model: "NVIDIA H100 80GB HBM3"}
  - {name: sim-spare, kind: simulated, pool: spare, hosts: 1, gpus_per_host: 4, model: "NVIDIA A100-SXM4-80GB"}
"""
DAY = datetime(2026, 11, 10, tzinfo=UTC)
WINDOW = {"since": "2026-11-10T00:00:00Z", "until": "2026-11-12T00:00:00Z"}


@pytest.fixture
def people(apply_yaml: Any, make_user: Any, api: Any) -> dict[str, Any]:
    """ann (a) used 2 H100 × 10 h from 10 Nov 20:00 (4 h that day, 6 the next), and 1 A100 × 2 h
    on 11 Nov; bob (b) 4 H100 × 1 h on 11 Nov."""
    apply_yaml(FLEET)
    ann, bob = api(make_user("ann", teams=("a",))), api(make_user("bob", teams=("b",)))

    def used(client: Any, gpus: int, pool: str, start: datetime, hours: float) -> None:
        lease = client.post("/api/v1/leases/", {"pool": pool, "gpus": gpus}, format="json").json()
        run_pass()
        LeaseUsage.objects.filter(lease_id=lease["id"]).update(started_at=start,
                                                                ended_at=start + timedelta(hours=hours))

    used(ann, 2, "gpus", DAY + timedelta(hours=20), 10)
    used(ann, 1, "spare", DAY + timedelta(days=1, hours=3), 2)
    used(bob, 4, "gpus", DAY + timedelta(days=1, hours=12), 1)
    return {"ann": ann, "bob": bob, "admin": api(make_user("root", admin=True))}


def _u(group_by: str, key: str, gpu_hours: float, idle_gpu_hours: float = 0.0) -> dict[str, Any]:
    """A row of the report as the API gives it."""
    return {group_by: key, "gpu_hours": gpu_hours, "idle_gpu_hours": idle_gpu_hours}


def _rows(client: Any, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/api/v1/usage/", {**WINDOW, **params})
    assert response.status_code == 200, response.content
    return response.json()["rows"]


@pytest.mark.parametrize(("group_by", "expected"), [
    ("team", [_u("team", "a", 22.0), _u("team", "b", 4.0)]),
    ("pool", [_u("pool", "gpus", 24.0), _u("pool", "spare", 2.0)]),
    ("model", [_u("model", "NVIDIA A100-SXM4-80GB", 2.0),
               _u("model", "NVIDIA H100 80GB HBM3", 24.0)]),
    ("user", [_u("user", "ann", 22.0), _u("user", "bob", 4.0)]),
    ("day", [_u("day", "2026-11-10", 8.0), _u("day", "2026-11-11", 18.0)]),
])
def test_the_report_groups_by_each_key(people, group_by, expected) -> None:
    assert _rows(people["admin"], group_by=group_by) == expected


def test_a_window_clips_each_grant_and_filters_narrow_it(people) -> None:
    rows = _rows(people["admin"], since="2026-11-11T00:00:00Z", until="2026-11-11T02:00:00Z")
    assert rows == [_u("team", "a", 4.0)]
    assert _rows(people["admin"], pool="spare") == [_u("team", "a", 2.0)]
    assert _rows(people["admin"], team="b", group_by="pool") == [_u("pool", "gpus", 4.0)]


def test_with_prices_each_row_has_its_cost_and_the_unpriced_hours(people, apply_yaml) -> None:
    apply_yaml("prices: [{model: H100, per_gpu_hour: 2.5}]\n", discover=False)
    body = people["admin"].get("/api/v1/usage/", {**WINDOW, "group_by": "team"}).json()
    assert body["rows"] == [{**_u("team", "a", 22.0), "cost": 50.0, "unpriced_gpu_hours": 2.0},
                            {**_u("team", "b", 4.0), "cost": 10.0, "unpriced_gpu_hours": 0.0}]
    assert body["total"] == {"gpu_hours": 26.0, "idle_gpu_hours": 0.0, "cost": 60.0}
    assert body["since"] == "2026-11-10T00:00:00+00:00" and body["group_by"] == "team"


def test_idle_gpu_hours_stand_beside_the_used_ones_in_every_grouping(people) -> None:
    """ann's H100s sat idle 1 GPU-hour in the hour from 22:00 on the 10th and half of one from 01:00
    on the 11th (rows as the idle check meters them); a window takes an hour's share of its row."""
    from allocation.models import IdleUsage, Lease

    lease = Lease.objects.get(user__username="ann", pool__name="gpus")
    for hour, seconds in ((DAY + timedelta(hours=22), 3600.0), (DAY + timedelta(days=1, hours=1), 1800.0)):
        IdleUsage.objects.create(team=lease.team, pool=lease.pool, user=lease.user, model="NVIDIA H100 80GB HBM3",
                                 hour=hour, gpu_seconds=seconds)
    assert _rows(people["admin"]) == [_u("team", "a", 22.0, 1.5), _u("team", "b", 4.0)]
    assert _rows(people["admin"], group_by="day") == [_u("day", "2026-11-10", 8.0, 1.0),
                                                      _u("day", "2026-11-11", 18.0, 0.5)]
    assert _rows(people["admin"], group_by="model")[1] == _u("model", "NVIDIA H100 80GB HBM3", 24.0, 1.5)
    assert _rows(people["ann"], group_by="user") == [_u("user", "ann", 22.0, 1.5)]
    half = _rows(people["admin"], since="2026-11-11T01:30:00Z", until="2026-11-12T00:00:00Z")
    assert half[0] == _u("team", "a", 11.0, 0.25)  # 2 H100 × 4.5 h, 1 A100 × 2 h
    assert _rows(people["admin"], pool="spare") == [_u("team", "a", 2.0)]
    body = people["admin"].get("/api/v1/usage/", WINDOW).json()
    assert body["total"] == {"gpu_hours": 26.0, "idle_gpu_hours": 1.5}
    assert _command("--group-by", "team").splitlines()[1].split() == ["a", "22.00", "1.50"]


def test_members_see_their_teams_only(people) -> None:
    assert _rows(people["ann"]) == [_u("team", "a", 22.0)]
    assert _rows(people["bob"], group_by="user") == [_u("user", "bob", 4.0)]
    response = people["ann"].get("/api/v1/usage/", {**WINDOW, "team": "b"})
    assert response.status_code == 403 and response.json()["code"] == "not_a_member"


@pytest.mark.parametrize(("params", "status", "code", "field"), [
    ({"group_by": "week"}, 400, "invalid", "group_by"),
    ({"since": "yesterday"}, 400, "invalid", "since"),
    ({"until": ""}, 400, "invalid", "until"),
    ({"since": "2026-11-12T00:00:00Z", "until": "2026-11-10T00:00:00Z"}, 400, "invalid_window", "since"),
    ({"since": "2024-01-01T00:00:00Z", "group_by": "day"}, 400, "window_too_long", "until"),
    ({"team": "ghost"}, 400, "unknown_team", "team"),
    ({"pool": "nowhere"}, 400, "unknown_pool", "pool"),
])
def test_bad_input_is_a_400_with_a_code_naming_the_parameter(people, params, status, code, field) -> None:
    response = people["admin"].get("/api/v1/usage/", {**WINDOW, **params})
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and field in body["details"]


def test_the_default_window_is_this_month_so_far(people) -> None:
    body = people["admin"].get("/api/v1/usage/").json()
    since = datetime.fromisoformat(body["since"])
    assert since.day == 1 and since.hour == 0 and datetime.fromisoformat(body["until"]) > since


def test_the_report_is_in_the_openapi_schema(people) -> None:
    schema = people["admin"].get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/v1/usage/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"team", "pool", "since", "until", "group_by"}


def _command(*args: str) -> str:
    out = StringIO()
    call_command("usage", "--since", "2026-11-10", "--until", "2026-11-12", *args, stdout=out)
    return out.getvalue()


def test_the_command_prints_json_csv_and_a_table(people) -> None:
    as_json = json.loads(_command("-o", "json", "--group-by", "pool"))
    assert as_json["rows"] == [_u("pool", "gpus", 24.0), _u("pool", "spare", 2.0)]
    rows = list(csv.reader(io.StringIO(_command("-o", "csv", "--team", "a", "--group-by", "day"))))
    assert rows == [["day", "gpu_hours", "idle_gpu_hours"], ["2026-11-10", "8.0", "0.0"], ["2026-11-11", "14.0", "0.0"]]
    table = _command("--group-by", "user").splitlines()
    assert table[0].split() == ["user", "gpu_hours", "idle_gpu_hours"]
    assert table[1].split() == ["ann", "22.00", "0.00"] and table[2].split() == ["bob", "4.00", "0.00"]
    assert table[3] == "total 26.00 GPU-hours (0.00 idle)"


def test_the_command_refuses_bad_input_in_words(people) -> None:
    with pytest.raises(CommandError, match="team 'ghost' does not exist"):
        _command("--team", "ghost")
    with pytest.raises(CommandError, match="not an ISO 8601"):
        call_command("usage", "--since", "last week", stdout=StringIO())


def test_the_team_api_shows_each_budget_with_its_use_and_warning(people, apply_yaml) -> None:
    apply_yaml("budgets: [{team: a, gpu_hours: 1, period: month, action: lower_priority}]\n", discover=False)
    ann = people["ann"]
    lease = ann.post("/api/v1/leases/", {"pool": "gpus", "gpus": 2}, format="json").json()
    run_pass()
    LeaseUsage.objects.exclude(lease_id=lease["id"]).delete()  # the fixture's November hours
    now = datetime.now(UTC)
    LeaseUsage.objects.filter(lease_id=lease["id"]).update(started_at=now - timedelta(minutes=24))
    budgets_refresh(now=now)  # 2 GPUs × 24 minutes: 0.8 GPU-hours
    [budget] = ann.get("/api/v1/teams/a/").json()["budgets"]
    assert budget["gpu_hours"] == 1 and budget["pool"] is None and budget["action"] == "lower_priority"
    assert budget["used_gpu_hours"] == pytest.approx(0.8, abs=0.01) and 80 <= budget["used_pct"] < 82
    assert budget["warning"].startswith("80% of budget: team a used 0.8 of 1 GPU-hours of its monthly budget")
    assert ann.get("/api/v1/teams/a/").json()["budgets"][0]["resets_at"].startswith(
        f"{now.year + (now.month == 12)}-{now.month % 12 + 1:02d}-01")
