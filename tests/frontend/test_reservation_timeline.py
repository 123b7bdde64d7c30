"""The queue page's reservations timeline: a block per reservation placed on the axis, a cancel
button (a CSRF form) only for the team's members and admins, and the cancel itself."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocation.models import Reservation
from allocation.services.reservations import reservation_create

pytestmark = pytest.mark.django_db


def _reserve(user: Any, team: str, hours: float, length: float = 6) -> Reservation:
    start = timezone.now() + timedelta(hours=hours)
    return reservation_create(user=user, pool="training", team=team, gpus=2, start=start,
                              end=start + timedelta(hours=length))


def _block(html: str, pk: int) -> str:
    found = re.search(rf'<div class="tl-block[^"]*" data-reservation="{pk}".*?</div>', html, re.S)
    assert found, f"no block for reservation {pk}"
    return found.group(0)


def test_the_queue_page_shows_reservations_as_blocks_on_a_timeline(seeded: Any, client_for: Any) -> None:
    users = seeded.users
    now_on = _reserve(users["alice"], "vision", 0, 12)
    later = _reserve(users["root"], "research", 12, 12)
    html = client_for(users["alice"]).get("/queue/").content.decode()
    first, second = _block(html, now_on.pk), _block(html, later.pk)
    assert "tl-now" in first and "tl-now" not in second
    assert 'style="left:0.0%;width:50.0%"' in first and 'style="left:50.0%;width:50.0%"' in second
    assert "vision · 2 GPUs" in first and "research · 2 GPUs" in second
    assert "csrfmiddlewaretoken" in first and "Cancel" in first  # alice's team
    assert "Cancel" not in second  # another team's
    admin_html = client_for(users["root"]).get("/queue/").content.decode()
    assert "Cancel" in _block(admin_html, later.pk)


def test_cancel_from_the_timeline_is_for_the_team_and_admins(seeded: Any, client_for: Any) -> None:
    users = seeded.users
    theirs = _reserve(users["root"], "research", 1)
    alice = client_for(users["alice"])
    response = alice.post(f"/queue/reservations/{theirs.pk}/cancel/", follow=True)
    assert "you are not a member of team" in response.content.decode()
    assert Reservation.objects.get(pk=theirs.pk).state == "active"
    assert alice.get(f"/queue/reservations/{theirs.pk}/cancel/").status_code == 405
    mine = _reserve(users["alice"], "vision", 1)
    response = alice.post(f"/queue/reservations/{mine.pk}/cancel/", follow=True)
    assert f"Reservation {mine.pk} is cancelled." in response.content.decode()
    assert Reservation.objects.get(pk=mine.pk).state == "cancelled"
    assert f'data-reservation="{mine.pk}"' not in response.content.decode()


def test_an_empty_timeline_says_how_to_reserve(seeded: Any, client_for: Any) -> None:
    html = client_for(seeded.users["alice"]).get("/queue/").content.decode()
    assert "No reservations ahead." in html
