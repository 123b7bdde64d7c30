"""The audit log over the API: a lease's trail in order, and the log scoped to the caller."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import run_pass

pytestmark = pytest.mark.django_db


def test_a_lease_trail_lists_its_changes_oldest_first_with_who_and_why(world: Any, api: Any) -> None:
    client = api(world.member)
    run_pass()
    client.post(f"/api/v1/leases/{world.lease_id}/release/", {"reason": "done training"}, format="json")
    events = client.get(f"/api/v1/leases/{world.lease_id}/events/").json()
    assert [e["action"] for e in events] == ["lease.created", "lease.granted", "lease.released"]
    assert events[0]["actor"] == "alice" and events[1]["actor"] == "system:scheduler"
    assert events[2]["message"] == "done training"
    assert all(e["lease"] == world.lease_id for e in events)


def test_members_see_only_their_teams_lease_events_and_admins_see_admin_actions(world: Any, api: Any) -> None:
    api(world.admin).post(f"/api/v1/hosts/{world.host_id}/cordon/")
    api(world.admin).patch(f"/api/v1/quotas/{world.quota_id}/", {"limit": 20}, format="json")
    admin_view = api(world.admin).get("/api/v1/audit-events/").json()["results"]
    assert {"host.cordon", "quota.update", "lease.created"} <= {e["action"] for e in admin_view}
    mine = api(world.member).get("/api/v1/audit-events/").json()["results"]
    assert mine and all(e["lease"] == world.lease_id for e in mine)
    assert api(world.other).get("/api/v1/audit-events/").json()["count"] == 0


def test_audit_events_filter_by_action_prefix_actor_and_lease(world: Any, api: Any) -> None:
    api(world.admin).post(f"/api/v1/hosts/{world.host_id}/cordon/")
    client = api(world.admin)
    hosts = client.get("/api/v1/audit-events/?action_prefix=host.").json()["results"]
    assert [e["action"] for e in hosts] == ["host.cordon"] and hosts[0]["actor"] == "root"
    assert client.get("/api/v1/audit-events/?actor=alice").json()["count"] == 1
    assert client.get(f"/api/v1/audit-events/?lease={world.lease_id}").json()["count"] == 1
