"""Quotas show their lending limit and pool admins PATCH it: at most the guarantee, refused with
a 400 naming the field (nothing changes then), audited when it changes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allocation.models import AuditEvent, Quota

pytestmark = pytest.mark.django_db


def _quota(world: Any) -> tuple[int, int | None, int | None]:
    quota = Quota.objects.get(pk=world.quota_id)
    return quota.guaranteed, quota.limit, quota.lending_limit


def test_a_quota_shows_its_lending_limit_and_an_admin_sets_it(world: Any, api: Any) -> None:
    url = f"/api/v1/quotas/{world.quota_id}/"
    assert api(world.member).get(url).json()["lending_limit"] is None  # all of it may be lent
    changed = api(world.admin).patch(url, {"lending_limit": 2}, format="json")
    assert changed.status_code == 200 and changed.json()["lending_limit"] == 2
    assert changed.json()["guaranteed"] == 8 and changed.json()["limit"] == 24  # left as they were
    listed = api(world.member).get("/api/v1/quotas/?team=vision&pool=training").json()["results"]
    assert [q["lending_limit"] for q in listed] == [2]
    event = AuditEvent.objects.get(action="quota.update")
    assert event.data == {"before": {"lending_limit": None}, "after": {"lending_limit": 2}}
    assert "lending_limit all → 2" in event.message
    cleared = api(world.admin).patch(url, {"lending_limit": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["lending_limit"] is None


@pytest.mark.parametrize("body, field, message", [
    ({"lending_limit": 9}, "lending_limit", "lending_limit 9 is above guaranteed 8"),
    ({"guaranteed": 4, "lending_limit": 6}, "lending_limit", "lending_limit 6 is above guaranteed 4"),
    ({"lending_limit": -1}, "lending_limit", "lending_limit: Ensure this value is greater than or equal to 0."),
    ({"lending_limit": "two"}, "lending_limit", "lending_limit: A valid integer is required."),
])
def test_a_bad_lending_limit_is_a_400_naming_the_field_and_changes_nothing(
        world: Any, api: Any, body: dict[str, Any], field: str, message: str) -> None:
    before = _quota(world)
    response = api(world.admin).patch(f"/api/v1/quotas/{world.quota_id}/", body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["code"] in {"invalid_quota", "invalid"} and message in error["message"]
    assert list(error["details"]) == [field]
    assert _quota(world) == before
    assert not AuditEvent.objects.filter(action="quota.update").exists()


def test_lowering_the_guarantee_below_the_lending_limit_in_force_is_refused(world: Any, api: Any) -> None:
    url = f"/api/v1/quotas/{world.quota_id}/"
    assert api(world.admin).patch(url, {"lending_limit": 6}, format="json").status_code == 200
    refused = api(world.admin).patch(url, {"guaranteed": 4}, format="json")
    assert refused.status_code == 400
    assert refused.json() == {
        "code": "invalid_quota",
        "message": "lending_limit 6 is above guaranteed 4: a team lends at most its guarantee",
        "details": {"lending_limit": ["lending_limit 6 is above guaranteed 4: a team lends at most "
                                      "its guarantee"]}}
    assert _quota(world) == (8, 24, 6)
    # Both in one request: the lending limit goes down with the guarantee.
    both = api(world.admin).patch(url, {"guaranteed": 4, "lending_limit": 1}, format="json")
    assert both.status_code == 200 and _quota(world) == (4, 24, 1)


def test_the_schema_documents_the_lending_limit(client: Any) -> None:
    schema = json.loads(client.get("/api/v1/schema/?format=json").content)["components"]["schemas"]
    shown = schema["Quota"]["properties"]["lending_limit"]
    assert shown["nullable"] and "lendingLimit" in shown["description"]
    patch = schema["PatchedQuotaUpdateRequest"]["properties"]["lending_limit"]
    assert patch["minimum"] == 0 and patch["nullable"] and "at most the guarantee" in patch["description"]
