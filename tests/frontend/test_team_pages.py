"""The role homes: the teams list, a team's page (a member's first page), the pools list, and the
team page's buttons, checked against the rows behind them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from allocation.models import Lease, Team
from frontend.team_home import team_summaries

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def test_a_member_lands_on_their_team_an_admin_on_the_fleet(seeded: Any, client_for: Any) -> None:
    alice = client_for(seeded.users["alice"]).get("/")
    assert alice.status_code == 200 and alice.context["team"].name == "vision"
    html = alice.content.decode()
    assert f'data-lease="{seeded.leases["vision"].pk}"' in html  # her team's lease, with its buttons
    assert f'data-lease="{seeded.leases["waiting"].pk}"' in html  # and its queued request
    assert f'data-lease="{seeded.leases["research"].pk}"' not in html  # not another team's
    assert "pools" not in alice.context  # not the fleet summary
    root = client_for(seeded.users["root"]).get("/")
    assert "pools" in root.context and "home" not in root.context
    # The member's live part polls the team's own URL, whose fragment is the same part.
    assert 'hx-get="/teams/vision/"' in html
    part = client_for(seeded.users["alice"]).get("/teams/vision/", HTTP_HX_TARGET="team-live", **HX)
    assert part.content.decode().lstrip().startswith("<div") and "<html" not in part.content.decode()


def test_the_team_page_shows_quota_leases_queue_members(seeded: Any, client_for: Any) -> None:
    response = client_for(seeded.users["alice"]).get("/teams/vision/")
    home, html = response.context["home"], response.content.decode()
    training = next(q for q, _ in home.quotas if q.pool.name == "training")
    held = sum(lease.gpu_count for lease in Lease.objects.filter(team__name="vision", state="granted",
                                                                  pool__name="training"))
    assert training.used == held == 8
    assert re.search(rf'data-quota="training">{held}</span>', html)
    assert [lease.pk for lease in home.leases] == [seeded.leases["vision"].pk]
    waiting = seeded.leases["waiting"]
    assert [lease.pk for lease in home.queue] == [waiting.pk] and home.queue_total == 1 and home.queue_gpus == 16
    assert waiting.reason and waiting.reason in html.replace("&#x27;", "'")  # why it waits, in words
    assert '<li class="name">alice</li>' in html  # members
    assert 'aria-label="Renew lease' in html and 'aria-label="Cancel request' in html
    assert 'name="csrfmiddlewaretoken"' in html and 'data-history' in html  # CSRF-safe forms, the charts


def test_another_teams_page_is_a_404_and_an_admin_sees_any(seeded: Any, client_for: Any) -> None:
    assert client_for(seeded.users["alice"]).get("/teams/research/").status_code == 404
    assert client_for(seeded.users["root"]).get("/teams/research/").status_code == 200
    assert client_for(None).get("/teams/").status_code == 302


def test_the_teams_list_counts_members_quotas_and_queue(seeded: Any, client_for: Any) -> None:
    admin = client_for(seeded.users["root"]).get("/teams/")
    rows = {s.team.name: s for s in admin.context["teams"]}
    assert set(rows) == set(Team.objects.values_list("name", flat=True))
    vision = rows["vision"]
    assert vision.members == Team.objects.get(name="vision").members.count() >= 1 and vision.held == 8
    assert (vision.pending_leases, vision.pending_gpus) == (1, 16)
    member = client_for(seeded.users["alice"]).get("/teams/")
    assert [s.team.name for s in member.context["teams"]] == ["vision"]  # only her teams
    assert 'href="/teams/vision/"' in member.content.decode()


def test_teams_nest_under_their_parent_when_teams_have_one(seeded: Any) -> None:
    teams = list(Team.objects.prefetch_related("members").order_by("name"))
    parent = next(t for t in teams if t.name == "research")
    for team in teams:  # what the hierarchy's `parent_id` column will hold
        team.parent_id = parent.pk if team.name == "vision" else None
    top = team_summaries(user=seeded.users["root"], teams=teams)  # type: ignore[arg-type]
    names = [s.team.name for s in top]
    assert "vision" not in names
    assert [c.team.name for c in next(s for s in top if s.team.name == "research").children] == ["vision"]


def test_a_department_page_shows_its_teams_rolled_up(seeded: Any, client_for: Any) -> None:
    # vision under a new department "ai": the department's page lists vision with its GPUs, and
    # the department's own row counts what its teams hold.
    ai = Team.objects.create(name="ai")
    Team.objects.filter(name="vision").update(parent=ai)
    response = client_for(seeded.users["root"]).get("/teams/ai/")
    node, html = response.context["department"], response.content.decode()
    assert [n.name for n in node.walk()] == ["ai", "vision"] and [n.depth for n in node.walk()] == [0, 1]
    assert node.pools["training"].held == node.children[0].pools["training"].held == 8
    assert 'id="department-tree"' in html and 'data-team="vision" data-pool="training"' in html
    # The teams list nests vision under its department; a team without sub-teams has no such part.
    top = {s.team.name: s for s in client_for(seeded.users["root"]).get("/teams/").context["teams"]}
    assert "vision" not in top and [c.team.name for c in top["ai"].children] == ["vision"]
    vision = client_for(seeded.users["root"]).get("/teams/vision/")
    assert vision.context["department"] is None and 'id="department-tree"' not in vision.content.decode()


def test_the_pools_list_shows_states_queue_and_teams(seeded: Any, client_for: Any) -> None:
    response = client_for(seeded.users["alice"]).get("/pools/")
    rows = {s.pool.name: (s, teams) for s, teams in response.context["rows"]}
    training, teams = rows["training"]
    assert (training.capacity, training.allocated, training.pending_leases) == (32, 24, 2)
    assert {t.name: t.held for t in teams}["vision"] == 8
    assert 'href="/teams/vision/"' in response.content.decode()


def test_a_member_releases_and_cancels_from_the_team_page(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["alice"])
    waiting, held = seeded.leases["waiting"], seeded.leases["vision"]
    response = client.post(f"/leases/{waiting.pk}/release/", {"next": "/teams/vision/"})
    assert response.status_code == 302 and response["Location"] == "/teams/vision/"
    response = client.post(f"/leases/{held.pk}/renew/", {"next": "https://evil.example/"})
    assert response["Location"] == f"/leases/{held.pk}/"  # another site is never a target
    waiting.refresh_from_db()
    assert waiting.state == "released"
    # Another team's lease stays out of reach from here too.
    assert client.post(f"/leases/{seeded.leases['research'].pk}/release/",
                       {"next": "/teams/vision/"}).status_code == 404
