"""API tokens are stored as digests, expire, are revoked one by one, and a read-only token may only
read: through the API, the watch endpoints' authentication and the service itself."""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core import tokens
from core.errors import DomainError
from core.models import ApiToken
from core.tokens import token_issue, token_lookup, token_revoke
from tests.support.tokens import api_key

pytestmark = pytest.mark.django_db


def _client(key: str) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_only_the_digest_of_an_issued_key_is_stored(make_user: Any, caplog: pytest.LogCaptureFixture) -> None:
    alice = make_user("alice")
    with caplog.at_level(logging.DEBUG):
        key = token_issue(user=alice, name="laptop")
    row = ApiToken.objects.get(user=alice)
    assert len(key) >= 40 and row.prefix == key[:8] and row.name == "laptop" and row.scope == "write"
    assert row.digest == hashlib.sha256(key.encode()).hexdigest()
    stored = ApiToken.objects.filter(pk=row.pk).values().get()
    assert not any(key in str(value) for value in stored.values())  # the key itself is nowhere
    assert key not in caplog.text and row.digest not in caplog.text and row.prefix in caplog.text
    assert token_lookup(key).user == alice


def test_each_issue_gives_a_new_key_and_the_old_ones_keep_working(make_user: Any) -> None:
    alice = make_user("alice")
    first, second = api_key(alice), api_key(alice)
    assert first != second
    assert _client(first).get("/api/v1/pools/").status_code == 200
    assert _client(second).get("/api/v1/pools/").status_code == 200


def test_bad_issue_arguments_are_refused_and_store_nothing(make_user: Any) -> None:
    alice = make_user("alice")
    for kwargs, field in (({"scope": "admin"}, "scope"), ({"name": "x" * 101}, "name"),
                          ({"expires_in": timedelta(0)}, "expires_in")):
        with pytest.raises(DomainError) as refused:
            token_issue(user=alice, **kwargs)
        assert field in refused.value.details
    assert not ApiToken.objects.exists()


def test_an_expired_token_is_a_401_token_expired_even_while_cached(make_user: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    key = api_key(make_user("alice"), expires_in=timedelta(hours=1))
    client = _client(key)
    assert client.get("/api/v1/pools/").status_code == 200  # now in the cache
    later = timezone.now() + timedelta(hours=1, seconds=1)
    monkeypatch.setattr(tokens.timezone, "now", lambda: later)
    response = client.get("/api/v1/pools/")
    assert response.status_code == 401 and response.json()["code"] == "token_expired"
    assert response["Content-Type"].startswith("application/json")
    tokens.clear_token_cache()
    assert client.get("/api/v1/pools/").json()["code"] == "token_expired"


def test_a_revoked_token_is_a_401_token_revoked_and_others_of_the_user_keep_working(make_user: Any) -> None:
    alice = make_user("alice")
    kept, revoked = api_key(alice), api_key(alice)
    assert _client(revoked).get("/api/v1/pools/").status_code == 200
    token = tokens.token_by_prefix(revoked[:8])
    assert token_revoke(token=token) is True and token_revoke(token=token) is False  # idempotent
    response = _client(revoked).get("/api/v1/pools/")
    assert response.status_code == 401 and response.json()["code"] == "token_revoked"
    assert _client(kept).get("/api/v1/pools/").status_code == 200


def test_an_unknown_key_keeps_drfs_invalid_token_answer(db: Any) -> None:
    response = _client("x" * 43).get("/api/v1/pools/")
    assert response.status_code == 401 and response.json() == {"code": "authentication_failed",
                                                               "message": "Invalid token."}


def test_a_read_only_token_reads_but_may_not_write(demo_fleet: Any, make_user: Any, api: Any) -> None:
    alice = make_user("alice", teams=("vision",))
    reader = api(alice, scope="read")
    assert reader.get("/api/v1/leases/").status_code == 200
    assert reader.head("/api/v1/pools/").status_code == 200
    refused = reader.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "read_only_token"
    assert api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json").status_code == 201


def test_a_read_only_admin_token_may_not_use_admin_actions_that_name_their_own_permissions(
        demo_fleet: Any, make_user: Any, api: Any) -> None:
    from inventory.models import Host

    root = make_user("root", admin=True)
    host = Host.objects.order_by("name").first()
    assert host is not None
    refused = api(root, scope="read").post(f"/api/v1/hosts/{host.pk}/cordon/")
    assert refused.status_code == 403 and refused.json()["code"] == "read_only_token"
    assert Host.objects.get(pk=host.pk).state == "ready"
    assert api(root).post(f"/api/v1/hosts/{host.pk}/cordon/").status_code == 200
    quota = api(root).get("/api/v1/quotas/").json()["results"][0]  # QuotaViewSet has get_permissions of its own
    refused = api(root, scope="read").patch(f"/api/v1/quotas/{quota['id']}/", {"guaranteed": 0}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "read_only_token"
    assert api(root).get(f"/api/v1/quotas/{quota['id']}/").json()["guaranteed"] == quota["guaranteed"]


def test_last_use_is_written_at_most_once_a_minute(make_user: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    key = api_key(make_user("alice"))
    start = timezone.now()
    clock = [start]
    monkeypatch.setattr(tokens.timezone, "now", lambda: clock[0])
    token_lookup(key)
    assert ApiToken.objects.get().last_used_at == start
    for seconds in (10, 30, 59):
        clock[0] = start + timedelta(seconds=seconds)
        tokens.clear_token_cache()  # a cache miss each time: only the minute rule holds the write back
        token_lookup(key)
    assert ApiToken.objects.get().last_used_at == start
    clock[0] = start + timedelta(seconds=61)
    tokens.clear_token_cache()
    token_lookup(key)
    assert ApiToken.objects.get().last_used_at == clock[0]


def test_the_watch_endpoints_use_the_same_tokens(make_user: Any) -> None:
    from allocation.watch.access import viewer_from_headers
    from allocation.watch.handlers import HttpError

    alice = make_user("alice", teams=("vision",))
    reader = api_key(alice, scope="read")
    viewer = viewer_from_headers({"authorization": f"Token {reader}"})
    assert viewer is not None and viewer.user == alice  # watching is reading: any scope may
    assert viewer_from_headers({"authorization": "Token nope"}) is None
    token_revoke(token=tokens.token_by_prefix(reader))
    with pytest.raises(HttpError) as refused:
        viewer_from_headers({"authorization": f"Token {reader}"})
    assert refused.value.status == 401 and refused.value.code == "token_revoked"


def test_a_prefix_names_one_token_or_says_why_not(make_user: Any) -> None:
    from core.errors import Conflict, NotFound

    alice = make_user("alice")
    key = api_key(alice)
    other = ApiToken.objects.create(user=alice, prefix=key[:6] + "zz", digest="0" * 64)
    assert tokens.token_by_prefix(key[:8]).prefix == key[:8]
    assert tokens.token_by_prefix(key).prefix == key[:8]  # a whole key names its token
    with pytest.raises(Conflict):
        tokens.token_by_prefix(key[:6])
    with pytest.raises(NotFound):
        tokens.token_by_prefix("nothing!")
    assert other.pk


def test_no_key_starts_with_a_dash_that_a_command_line_reads_as_an_option(
        monkeypatch: pytest.MonkeyPatch, make_user: Any) -> None:
    import secrets

    drawn = iter(["-starts-with-a-dash" + "x" * 24, "A" * 43])
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: next(drawn))
    assert token_issue(user=make_user("alice"), name="cli") == "A" * 43
