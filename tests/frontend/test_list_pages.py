"""Queue, lease list, audit log and capacity picker at scale: filtered, sorted and paged in the
database, counts over the whole result, the query kept in links and in the live fragment's
poll, bad parameters named on the page, and a cost per page that does not grow with the rows."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease, PriorityClass, Team
from inventory.models import Host, Pool

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: big}, {name: small}]
teams: [{name: a, members: [ann]}, {name: b, members: [bob]}]
quotas: [{team: a, pool: big, guaranteed: 40, limit: null}, {team: b, pool: big, guaranteed: 40, limit: null},
         {team: a, pool: small, guaranteed: 8, limit: null}]
priority_classes: [{name: default, value: 0}, {name: high, value: 100}]
sources:
  - {name: h100, kind: simulated, pool: big, hosts: 10, gpus_per_host: 8, host_prefix: h100}
  - {name: a100, kind: simulated, pool: small, hosts: 2, gpus_per_host: 4, host_prefix: a100,
     model: "NVIDIA A100-SXM4-80GB"}
"""


@pytest.fixture
def fleet(apply_yaml: Any, make_user: Any) -> dict[str, Any]:
    """Every GPU of `big` held (20 leases of 4), then 120 pending there (60 a team, 1–4 GPUs)."""
    users = {"ann": make_user("ann", teams=("a",)), "bob": make_user("bob", teams=("b",)),
             "root": make_user("root", admin=True)}
    apply_yaml(FLEET)
    big, teams = Pool.objects.get(name="big"), {t.name: t for t in Team.objects.all()}
    default, high = PriorityClass.objects.get(name="default"), PriorityClass.objects.get(name="high")

    def add(n: int, size: Any) -> None:
        Lease.objects.bulk_create([Lease(team=teams["ab"[i % 2]], user=users[("ann", "bob")[i % 2]], pool=big,
                                         priority_class=high if i % 10 == 0 else default, gpu_count=size(i),
                                         ttl_seconds=600) for i in range(n)])

    add(20, lambda i: 4)
    run_pass([big.pk])
    add(120, lambda i: 1 + i % 4)
    run_pass([big.pk])
    assert Lease.objects.filter(state="pending").count() == 120
    return users


def _get(client: Any, url: str, **headers: Any) -> tuple[Any, str]:
    response = client.get(url, **headers)
    assert response.status_code == 200, url
    return response, response.content.decode()


def _count_line(html: str) -> str:
    found = re.search(r"<span class=\"muted\" data-count>([^<]+)</span>", html)
    assert found, "no count line"
    return found.group(1)


def test_the_queue_pages_fifty_at_a_time_with_counts_per_pool(fleet: Any, client_for: Any) -> None:
    admin = client_for(fleet["root"])
    response, html = _get(admin, "/queue/")
    assert len(response.context["leases"]) == 50 and _count_line(html) == "Pending leases 1–50 of 120"
    assert 'data-legend="big"' in html and "big: 120 waiting" in html
    assert response.context["page"].totals["gpus"] == sum(1 + i % 4 for i in range(120))  # 300
    positions = [lease.queue_position for lease in response.context["leases"]]
    assert positions == sorted(positions)  # the scheduler's order
    last, html = _get(admin, "/queue/?page=3")
    assert len(last.context["leases"]) == 20 and _count_line(html) == "Pending leases 101–120 of 120"
    assert 'id="queue-prev"' in html and 'id="queue-next"' not in html


def test_queue_filters_and_sorts_and_its_poll_keeps_them(fleet: Any, client_for: Any) -> None:
    admin = client_for(fleet["root"])
    response, html = _get(admin, "/queue/?team=a&sort=size&priority=default")
    leases = response.context["leases"]
    assert {lease.team.name for lease in leases} == {"a"}
    assert {lease.priority_class.name for lease in leases} == {"default"}
    sizes = [lease.gpu_count for lease in leases]
    assert sizes == sorted(sizes, reverse=True) and response.context["page"].total == 48  # 60 less 12 high
    assert 'hx-get="/queue/?team=a&amp;priority=default&amp;sort=size"' in html
    # The live fragment answers the same query, page included.
    _fragment, body = _get(admin, "/queue/?team=a&sort=size&priority=default&page=1",
                          HTTP_HX_REQUEST="true", HTTP_HX_TARGET="queue-live")
    assert body.lstrip().startswith('<div id="queue-live"') and _count_line(body) == "Pending leases 1–48 of 48"
    by_user, _ = _get(admin, "/queue/?q=ann")
    assert by_user.context["page"].total == 60
    lease = Lease.objects.filter(state="pending").first()
    assert lease is not None
    by_id, _ = _get(admin, f"/queue/?q={str(lease.pk)[:8]}")
    assert [row.pk for row in by_id.context["leases"]] == [lease.pk]


def test_the_queue_filters_by_why_a_lease_waits(fleet: Any, client_for: Any) -> None:
    admin = client_for(fleet["root"])
    big = Pool.objects.get(name="big")
    Lease.objects.create(team=Team.objects.get(name="a"), user=fleet["ann"], pool=big, gpu_count=9, ttl_seconds=600,
                         priority_class=PriorityClass.objects.get(name="default"))  # no host has 9 GPUs
    run_pass([big.pk])
    by_code = dict(Lease.objects.filter(state="pending").values_list("pending_code").annotate(n=Count("pk")))
    assert by_code["too_big"] == 1 and sum(by_code.values()) == 121 and "" not in by_code
    too_big, html = _get(admin, "/queue/?pending_code=too_big")
    assert [lease.gpu_count for lease in too_big.context["leases"]] == [9]
    assert 'id="queue-pending_code"' in html and 'data-code="too_big"' in html
    no_room, _ = _get(admin, "/queue/?pending_code=no_capacity")
    assert no_room.context["page"].total == by_code.get("no_capacity", 0)
    unknown, html = _get(admin, "/queue/?pending_code=bogus")
    assert unknown.context["page"].total == 121  # not a choice: dropped, and said so on the page
    assert "bogus" in html


def test_a_member_sees_and_may_filter_only_their_teams(fleet: Any, client_for: Any) -> None:
    ann = client_for(fleet["ann"])
    response, _ = _get(ann, "/queue/")
    assert response.context["page"].total == 60
    refused, html = _get(ann, "/queue/?team=b")
    assert refused.context["page"].total == 60  # another team is not a choice: dropped, and said so
    assert "Team “b” is not one of a: showing all teams." in html
    leases, _ = _get(ann, "/leases/")
    assert leases.context["page"].total == 70 and {lease.team.name for lease in leases.context["leases"]} == {"a"}


def test_the_lease_list_counts_states_over_every_page(fleet: Any, client_for: Any) -> None:
    admin = client_for(fleet["root"])
    response, html = _get(admin, "/leases/?page=2")
    assert _count_line(html) == "Leases 51–100 of 140"
    counts = {value: n for value, _, n in response.context["page"].counts}
    assert (counts["pending"], counts["granted"]) == (120, 20)
    # The legend's links filter by a state and keep the other filters.
    assert 'href="?state=granted&amp;team=a"' in _get(admin, "/leases/?team=a")[1]
    granted, _ = _get(admin, "/leases/?state=granted&sort=size")
    assert granted.context["page"].total == 20 and {lease.state for lease in granted.context["leases"]} == {"granted"}
    # The legend counts the other states of the result too, whatever state is asked for.
    assert {value: n for value, _, n in granted.context["page"].counts}["pending"] == 120
    host = Lease.objects.filter(state="granted").values_list("host__name", flat=True).first()
    assert host is not None
    by_host, _ = _get(admin, f"/leases/?q={host}")
    assert by_host.context["page"].total >= 1 and {lease.host.name for lease in by_host.context["leases"]} == {host}
    by_model, _ = _get(admin, "/leases/?model=H100")  # the model of the GPUs held
    assert by_model.context["page"].total == 20
    assert _get(admin, "/leases/?model=A100")[0].context["page"].total == 0


def test_bad_parameters_are_named_and_never_fail_the_page(fleet: Any, client_for: Any) -> None:
    admin = client_for(fleet["root"])
    for url in ["/queue/?pool=nowhere&page=0", "/leases/?state=bogus&sort=%00", "/audit/?window=1y&page=x",
                "/fleet/?state=bogus&page=-1", "/capacity/?sort=sideways", "/leases/?q=" + "%ff" * 300]:
        _response, html = _get(admin, url)
        if "q=" not in url:
            assert 'role="alert"' in html and "is not" in html, url
    _, html = _get(admin, "/leases/?state=bogus")
    assert "State “bogus” is not one of active, pending" in html and _count_line(html) == "Leases 1–50 of 140"


def test_the_audit_log_filters_by_kind_team_window_and_text(fleet: Any, client_for: Any) -> None:
    now, lease = timezone.now(), Lease.objects.filter(team__name="b").first()
    AuditEvent.objects.bulk_create([
        AuditEvent(at=now - timedelta(days=3), actor="root", action="host.cordon", object_type="host", object_id="7",
                   message="cordon host h100-3"),
        AuditEvent(at=now - timedelta(minutes=5), actor="bob", action="lease.released", object_type="lease",
                   object_id=str(lease.pk) if lease else "", lease=lease, message="finished early"),
    ])
    admin = client_for(fleet["root"])
    everything, html = _get(admin, "/audit/")
    total = AuditEvent.objects.count()
    assert everything.context["page"].total == total and f"of {total}" in _count_line(html)
    kinds = {value: n for value, _, n in everything.context["page"].counts}
    assert kinds["host"] == 1 and kinds["lease"] == AuditEvent.objects.filter(action__startswith="lease.").count()
    hosts, _ = _get(admin, "/audit/?kind=host")
    assert [e.action for e in hosts.context["events"]] == ["host.cordon"]
    recent, _ = _get(admin, "/audit/?kind=host&window=24h")
    assert recent.context["page"].total == 0
    found, _ = _get(admin, "/audit/?q=finished&team=b")
    assert [e.message for e in found.context["events"]] == ["finished early"]
    oldest, _ = _get(admin, "/audit/?sort=oldest")
    assert oldest.context["events"][0].action == "host.cordon"
    # Members: only their teams' lease events, no host actions.
    bob, _ = _get(client_for(fleet["bob"]), "/audit/")
    assert bob.context["page"].total == AuditEvent.objects.filter(lease__team__name="b").count()
    assert "host.cordon" not in {e.action for e in bob.context["events"]}


def test_the_capacity_picker_pages_hosts_and_carries_picks(fleet: Any, client_for: Any) -> None:
    admin = client_for(fleet["root"])
    response, html = _get(admin, "/capacity/?pool=big&sort=-name")
    assert [row.host.name for row in response.context["hosts"]][:2] == ["h100-9", "h100-8"]
    assert _count_line(html) == "Hosts 1–10 of 10" and "a100-0" not in html
    picked, other = Host.objects.get(name="h100-1"), Host.objects.get(name="a100-0")
    # HTMX filtering sends the picks along: the one on screen is ticked, the other is carried.
    _fragment, body = _get(admin, f"/capacity/?q=h100-1&hosts={picked.pk}&hosts={other.pk}&gpus=x",
                          HTTP_HX_REQUEST="true", HTTP_HX_TARGET="cap-hosts")
    assert body.lstrip().startswith('<div id="cap-hosts">')
    assert re.search(rf'id="pick-host-{picked.pk}"[^>]*\s+checked', body)
    assert f'<input type="hidden" name="hosts" value="{other.pk}" data-carried>' in body
    assert "Also picked on other pages: 1 host, 0 GPUs." in body


def test_a_page_costs_the_same_queries_at_ten_times_the_rows(fleet: Any, client_for: Any) -> None:
    admin = client_for(fleet["root"])
    urls = ["/queue/?sort=waiting", "/leases/?state=pending&page=2", "/audit/", "/capacity/"]
    before = {}
    for url in urls:
        with CaptureQueriesContext(connection) as queries:
            _get(admin, url)
        before[url] = len(queries.captured_queries)
    big, ann = Pool.objects.get(name="big"), get_user_model().objects.get(username="ann")
    default = PriorityClass.objects.get(name="default")
    Lease.objects.bulk_create([Lease(team=Team.objects.get(name="a"), user=ann, pool=big, priority_class=default,
                                     gpu_count=1, ttl_seconds=600) for _ in range(1200)])
    AuditEvent.objects.bulk_create([AuditEvent(actor="ann", action="lease.created", object_type="lease",
                                               object_id=str(i)) for i in range(1200)])
    for url in urls:
        with CaptureQueriesContext(connection) as queries:
            _get(admin, url)
        assert len(queries.captured_queries) <= before[url], url
