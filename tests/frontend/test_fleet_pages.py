"""The fleet page at fleet scale: filtered, sorted and paginated in the database, with counts over
the whole result and a cost per page that does not grow with the fleet."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocation.engine import run_pass
from allocation.models import Lease, PriorityClass, Team
from inventory.models import Pool

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: big}, {name: small}]
teams: [{name: a, members: [ann]}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: h100, kind: simulated, pool: big, hosts: 110, gpus_per_host: 8, host_prefix: h100}
  - {name: a100, kind: simulated, pool: small, hosts: 12, gpus_per_host: 4, host_prefix: a100,
     model: "NVIDIA A100-SXM4-80GB"}
"""


@pytest.fixture
def admin(apply_yaml: Any, make_user: Any, client_for: Any) -> Any:
    make_user("ann", teams=("a",))
    apply_yaml(FLEET)
    return client_for(make_user("root", admin=True))


def _natural(name: str) -> tuple[str, int]:
    prefix, _, number = name.rpartition("-")
    return prefix, int(number)


def _hosts(html: str) -> list[str]:
    return re.findall(r'data-host="([^"]+)"', html)


def _page(client: Any, query: str = "") -> str:
    response = client.get(f"/fleet/?{query}")
    assert response.status_code == 200
    return response.content.decode()


def test_hosts_come_fifty_a_page_with_the_totals(admin: Any) -> None:
    first = _page(admin)
    assert len(_hosts(first)) == 50
    assert "Hosts 1–50 of 122" in first and "page 1 of 3" in first
    assert 'data-legend="free">Free: 928<' in first  # 110 × 8 + 12 × 4, every page
    last = _page(admin, "page=3")
    assert len(_hosts(last)) == 22 and "Hosts 101–122 of 122" in last
    assert _page(admin, "page=99").count("data-host=") == 22  # past the end: the last page
    assert _page(admin, "page=zero").count("data-host=") == 50  # not a number: the first


def test_filters_by_pool_model_state_and_host_name(admin: Any) -> None:
    assert len(_hosts(_page(admin, "pool=small"))) == 12
    assert set(_hosts(_page(admin, "model=a100"))) == {f"a100-{i}" for i in range(12)}
    named = _hosts(_page(admin, "q=h100-10"))
    assert named == ["h100-10", "h100-100", "h100-101", "h100-102", "h100-103", "h100-104",
                     "h100-105", "h100-106", "h100-107", "h100-108", "h100-109"]
    assert "No hosts match" in _page(admin, "state=leased")
    assert len(_hosts(_page(admin, "state=bogus&sort=bogus"))) == 50  # unknown values are ignored


def test_sorting_by_leased_puts_the_busiest_host_first(admin: Any) -> None:
    pool = Pool.objects.get(name="big")
    team, default = Team.objects.get(name="a"), PriorityClass.objects.get(name="default")
    from django.contrib.auth import get_user_model
    ann = get_user_model().objects.get(username="ann")
    Lease.objects.bulk_create([Lease(team=team, user=ann, pool=pool, priority_class=default, gpu_count=8,
                                     ttl_seconds=600) for _ in range(3)])
    run_pass([pool.pk])
    leased = _page(admin, "state=leased")
    assert "Hosts 1–3 of 3" in leased
    busiest = _hosts(_page(admin, "sort=leased"))
    # Then by name in natural order (the column's collation: h100-2 before h100-10).
    assert set(busiest[:3]) == set(_hosts(leased)) and busiest[3:] == sorted(busiest[3:], key=_natural)
    assert _hosts(_page(admin, "sort=-name"))[0] == "h100-109"


def test_a_page_costs_the_same_queries_whatever_the_fleet(admin: Any, apply_yaml: Any) -> None:
    with CaptureQueriesContext(connection) as small:
        _page(admin, "pool=small")
    apply_yaml("sources: [{name: more, kind: simulated, pool: big, hosts: 300, gpus_per_host: 8, "
               "host_prefix: more}]\n")
    with CaptureQueriesContext(connection) as large:
        _page(admin, "pool=big&page=2")
    assert len(large.captured_queries) <= len(small.captured_queries) + 2
