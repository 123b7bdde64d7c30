"""URLs work with or without the trailing slash: a POST without it is served, not redirected
(a 301 would turn it into a GET and lose the body)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db


def test_a_post_without_the_trailing_slash_creates_the_lease(world: Any, api: Any) -> None:
    client = api(world.member)
    created = client.post("/api/v1/leases", {"pool": "training", "gpus": 1}, format="json")
    assert created.status_code == 201, created.content
    assert client.post(f"/api/v1/leases/{created.json()['id']}/release").json()["state"] == "released"
    assert client.get("/api/v1/pools").status_code == 200
    assert client.get("/api/v1/pools/training").json()["name"] == "training"
