"""`GET leases/?id_prefix=`: the leases whose id starts with some hex digits, scoped like the list
(a member finds their teams' leases only), answered from a range of the primary key."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocation.filtersets import id_range
from allocation.models import Lease

pytestmark = pytest.mark.django_db


@pytest.fixture
def leases(demo_fleet, make_user, api):
    alice, carol = make_user("alice", teams=("vision",)), make_user("carol", teams=("nlp",))
    mine = [api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json").json()["id"]
            for _ in range(3)]
    theirs = api(carol).post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json").json()["id"]
    return {"alice": api(alice), "carol": api(carol), "mine": mine, "theirs": theirs}


def test_a_prefix_finds_the_one_lease_it_starts(leases) -> None:
    lease_id = leases["mine"][1]
    for prefix in (lease_id[:8], lease_id[:8].upper(), lease_id[:13], lease_id.replace("-", "")[:12], lease_id):
        page = leases["alice"].get("/api/v1/leases/", {"id_prefix": prefix}).json()
        assert [row["id"] for row in page["results"]] == [lease_id], prefix


def test_a_prefix_of_another_teams_lease_finds_nothing_for_a_member(leases) -> None:
    page = leases["alice"].get("/api/v1/leases/", {"id_prefix": leases["theirs"][:8]}).json()
    assert page["count"] == 0 and page["results"] == []
    page = leases["carol"].get("/api/v1/leases/", {"id_prefix": leases["theirs"][:8]}).json()
    assert page["count"] == 1


def test_a_short_prefix_counts_every_lease_it_starts(leases) -> None:
    digit = leases["mine"][0][0]
    expected = sum(1 for lease_id in leases["mine"] if lease_id.startswith(digit))
    assert leases["alice"].get("/api/v1/leases/", {"id_prefix": digit}).json()["count"] == expected


@pytest.mark.parametrize("bad", ["xyz", "12 4", "0" * 33, "g1", "--", "%"])
def test_a_prefix_that_is_not_hex_digits_is_a_400_naming_it(leases, bad) -> None:
    answer = leases["alice"].get("/api/v1/leases/", {"id_prefix": bad})
    assert answer.status_code == 400 and "id_prefix" in answer.json()["details"], answer.json()


def test_the_lookup_is_a_range_of_the_primary_key() -> None:
    low, high = id_range("8f0c1d2e7")
    assert str(low) == "8f0c1d2e-7000-0000-0000-000000000000"
    assert str(high) == "8f0c1d2e-7fff-ffff-ffff-ffffffffffff"
    with CaptureQueriesContext(connection) as queries:
        list(Lease.objects.filter(pk__gte=low, pk__lte=high))
    assert "::text" not in queries[0]["sql"] and "LIKE" not in queries[0]["sql"].upper()
