"""Who may reach what: anonymous users are sent to the login form, members get 403 on every admin
action even by URL and 404 on another team's lease, admins may do everything."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from allocation.models import AuditEvent, Lease, Quota, Team
from inventory.models import Gpu, Host

pytestmark = pytest.mark.django_db

PAGES = ["/", "/quotas/", "/fleet/", "/queue/", "/leases/", "/capacity/", "/teams/", "/pools/", "/teams/vision/"]


def admin_posts(seeded: Any) -> dict[str, dict[str, Any]]:
    quota = Quota.objects.get(team__name="vision", pool__name="training")
    host = Host.objects.get(name="demo-node-3")
    return {
        f"/quotas/{quota.pk}/": {"guaranteed": 0, "limit": 1},
        "/quotas/teams/nlp/weight/": {"weight": 9},
        f"/fleet/hosts/{host.pk}/cordon/": {},
        f"/fleet/hosts/{host.pk}/drain/": {},
        "/capacity/preview/": {"pool": "inference", "hosts": [host.pk], "mode": "keep"},
        "/capacity/confirm/": {"pool": "inference", "hosts": [host.pk], "mode": "keep"},
    }


def test_anonymous_users_are_sent_to_the_login_form(seeded: Any) -> None:
    client = Client()
    lease = seeded.leases["vision"]
    for url in [*PAGES, f"/leases/{lease.pk}/"]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(f"/login/?next={url}"), url
    for url, data in admin_posts(seeded).items():
        assert client.post(url, data).status_code == 302, url
    assert client.post(f"/leases/{lease.pk}/release/").status_code == 302
    assert Lease.objects.get(pk=lease.pk).state == "granted"


def test_an_htmx_poll_from_an_expired_session_redirects_the_whole_page() -> None:
    response = Client().get("/fleet/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="fleet-live")
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/login/?next=/fleet/"
    assert response.content == b""


def test_the_login_form_signs_a_member_in_and_logout_signs_out(seeded: Any) -> None:
    client = Client()
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "alice", "password": "wrong"})
    assert response.status_code == 200 and b"correct username and password" in response.content
    response = client.post("/login/?next=/queue/", {"username": "alice", "password": "correct horse battery",
                                                    "next": "/queue/"})
    assert response.status_code == 302 and response["Location"] == "/queue/"
    assert client.get("/queue/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/queue/").status_code == 302


def test_a_member_cannot_reach_admin_actions_even_by_url(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["alice"])
    before = (list(Quota.objects.values_list("guaranteed", "limit")), list(Host.objects.values_list("state")),
              list(Gpu.objects.values_list("pool_id")), Team.objects.get(name="nlp").weight)
    assert client.get("/capacity/").status_code == 403
    for url, data in admin_posts(seeded).items():
        response = client.post(url, data)
        assert response.status_code == 403, url
    # With HTMX headers too: no fragment leaks out.
    assert client.post("/capacity/preview/", {"pool": "inference"}, HTTP_HX_REQUEST="true").status_code == 403
    after = (list(Quota.objects.values_list("guaranteed", "limit")), list(Host.objects.values_list("state")),
             list(Gpu.objects.values_list("pool_id")), Team.objects.get(name="nlp").weight)
    assert before == after
    assert not AuditEvent.objects.filter(actor="alice").exclude(action__startswith="lease.").exists()
    page = client.get("/fleet/").content.decode()
    assert "Cordon host" not in page and "Drain host" not in page
    assert 'href="/capacity/"' not in client.get("/").content.decode()


def test_a_member_cannot_see_or_touch_another_teams_lease(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["alice"])  # vision
    other = seeded.leases["research"]
    assert client.get(f"/leases/{other.pk}/").status_code == 404
    assert client.post(f"/leases/{other.pk}/release/").status_code == 404
    assert client.post(f"/leases/{other.pk}/renew/", {"ttl_seconds": 7200}).status_code == 404
    other.refresh_from_db()
    assert other.state == "granted" and other.ttl_seconds == 3600
    listing = client.get("/leases/").content.decode()
    assert str(other.pk)[:8] not in listing and str(seeded.leases["vision"].pk)[:8] in listing
    queue = client.get("/queue/").content.decode()
    assert str(seeded.leases["waiting"].pk) in queue and str(seeded.leases["waiting_limit"].pk) not in queue


def test_a_member_releases_and_renews_their_teams_lease(seeded: Any, client_for: Any) -> None:
    bob_lease = seeded.leases["vision"]
    client = client_for(seeded.users["alice"])
    response = client.post(f"/leases/{bob_lease.pk}/renew/", {"ttl_seconds": 7200}, follow=True)
    assert b"renewed" in response.content
    bob_lease.refresh_from_db()
    assert bob_lease.ttl_seconds == 7200
    response = client.post(f"/leases/{bob_lease.pk}/release/", {"reason": "done for today"}, follow=True)
    assert response.status_code == 200 and b"is released" in response.content
    bob_lease.refresh_from_db()
    assert bob_lease.state == "released" and bob_lease.reason == "done for today"
    assert AuditEvent.objects.filter(lease=bob_lease, action="lease.released", actor="alice").exists()
    assert client.get(f"/leases/{bob_lease.pk}/release/").status_code == 405  # POST only


def test_an_admin_reaches_everything(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["root"])
    for url in [*PAGES, f"/leases/{seeded.leases['research'].pk}/", "/admin/"]:
        assert client.get(url).status_code == 200, url
    host = Host.objects.get(name="demo-node-3")
    assert client.get(f"/fleet/hosts/{host.pk}/cordon/").status_code == 405
    response = client.post(f"/fleet/hosts/{host.pk}/cordon/", follow=True)
    assert b"demo-node-3 cordoned" in response.content
    assert Host.objects.get(pk=host.pk).state == "cordoned"
    assert AuditEvent.objects.filter(action="host.cordon", actor="root", object_id=str(host.pk)).exists()


def test_admin_actions_need_the_csrf_token(seeded: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(seeded.users["root"])
    host = Host.objects.get(name="demo-node-3")
    assert client.post(f"/fleet/hosts/{host.pk}/cordon/").status_code == 403
    assert Host.objects.get(pk=host.pk).state == "ready"
