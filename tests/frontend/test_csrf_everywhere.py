"""CSRF on every form: each route of the dashboard's URLconf, posted by a signed-in admin without
the token, is refused and changes nothing; the API refuses a session-authenticated write without
it too. The routes are read from the URLconf, so a new form cannot slip past this test."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from allocation.models import AuditEvent, Lease, Quota
from inventory.models import Gpu, Host

pytestmark = pytest.mark.django_db

# A sample value per URL converter argument; CSRF is checked before the view runs, so an id that
# names nothing must still be refused with 403, not 404.
ARGS = {"quota_id": 1, "team_name": "nlp", "host_id": 1, "verb": "cordon", "reservation_id": 1,
        "lease_id": uuid.uuid4(), "name": "training", "uuid": "GPU-0"}


def dashboard_routes() -> list[str]:
    resolver = get_resolver()
    names: list[str] = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver) and entry.namespace == "frontend":
            names += [f"frontend:{p.name}" for p in entry.url_patterns if isinstance(p, URLPattern)]
    assert len(names) >= 15, names  # the URLconf was found
    return names


def _url(name: str) -> str:
    from django.urls import reverse
    from django.urls.exceptions import NoReverseMatch

    for kwargs in ({}, *({k: v for k, v in ARGS.items() if k in combo} for combo in _combos())):
        try:
            return reverse(name, kwargs=kwargs)
        except NoReverseMatch:
            continue
    raise AssertionError(f"no sample arguments reverse {name}: add them to ARGS")


def _combos() -> list[set[str]]:
    keys = list(ARGS)
    return [{a} for a in keys] + [{a, b} for a in keys for b in keys if a < b]


def _state() -> tuple[Any, ...]:
    return (list(Quota.objects.order_by("pk").values_list("guaranteed", "limit")),
            list(Host.objects.order_by("pk").values_list("state", "admin_state")),
            list(Gpu.objects.order_by("pk").values_list("pool_id", flat=True)),
            list(Lease.objects.order_by("pk").values_list("state", "ttl_seconds")),
            AuditEvent.objects.count())


def test_every_dashboard_post_without_the_token_is_refused(seeded: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(seeded.users["root"])
    lease = seeded.leases["vision"]
    ARGS["lease_id"] = lease.pk
    ARGS["host_id"] = Host.objects.get(name="demo-node-3").pk
    ARGS["quota_id"] = Quota.objects.order_by("pk").first().pk  # type: ignore[union-attr]
    before = _state()
    for name in dashboard_routes():
        response = client.post(_url(name), {"guaranteed": 0, "limit": 0, "weight": 9, "pool": "inference"})
        assert response.status_code == 403, name
    assert _state() == before


def test_the_api_refuses_a_session_write_without_the_token(seeded: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(seeded.users["root"])
    lease = seeded.leases["vision"]
    response = client.post(f"/api/v1/leases/{lease.pk}/release/", {}, content_type="application/json")
    assert response.status_code == 403
    body = response.json()
    assert "CSRF" in body["message"], body
    assert Lease.objects.get(pk=lease.pk).state == lease.state
    # Reading needs no token.
    assert client.get(f"/api/v1/leases/{lease.pk}/").status_code == 200
