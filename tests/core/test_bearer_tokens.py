"""`Authorization: Bearer KEY` is the same key as `Authorization: Token KEY`, wherever the API takes
a token: the DRF views and the watch endpoints (long poll, event stream)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from allocation.watch.access import HttpError, viewer_from_headers
from core.models import ApiToken
from core.tokens import key_from_authorization, token_issue, token_revoke

pytestmark = pytest.mark.django_db


def _client(header: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    return client


@pytest.mark.parametrize("scheme", ["Token", "Bearer", "bearer", "TOKEN"])
def test_both_schemes_authenticate_the_api(make_user: Any, scheme: str) -> None:
    key = token_issue(user=make_user("alice", teams=("vision",)))
    answer = _client(f"{scheme} {key}").get("/api/v1/pools/")
    assert answer.status_code == 200, answer.json()


@pytest.mark.parametrize("header, code", [("Bearer nope", "authentication_failed"),
                                          ("Bearer", "authentication_failed"),
                                          ("Bearer a b", "authentication_failed")])
def test_a_bad_bearer_header_is_a_401(header: str, code: str) -> None:
    answer = _client(header).get("/api/v1/pools/")
    assert answer.status_code == 401 and answer.json()["code"] == code


def test_a_revoked_key_is_refused_the_same_under_either_scheme(make_user: Any) -> None:
    key = token_issue(user=make_user("alice"))
    token_revoke(token=ApiToken.objects.get())
    for scheme in ("Token", "Bearer"):
        answer = _client(f"{scheme} {key}").get("/api/v1/pools/")
        assert answer.status_code == 401 and answer.json()["code"] == "token_revoked"


def test_an_unknown_scheme_is_not_authenticated(make_user: Any) -> None:
    key = token_issue(user=make_user("alice"))
    assert _client(f"Basic {key}").get("/api/v1/pools/").status_code in (401, 403)


def test_the_watch_endpoints_take_both_schemes(make_user: Any) -> None:
    alice = make_user("alice", teams=("vision",))
    key = token_issue(user=alice)
    for scheme in ("Token", "Bearer"):
        viewer = viewer_from_headers({"authorization": f"{scheme} {key}"})
        assert viewer is not None and viewer.user.pk == alice.pk
    assert viewer_from_headers({"authorization": f"Basic {key}"}) is None
    assert viewer_from_headers({"authorization": "Bearer"}) is None
    token_revoke(token=ApiToken.objects.get())
    with pytest.raises(HttpError) as refused:
        viewer_from_headers({"authorization": f"Bearer {key}"})
    assert refused.value.code == "token_revoked"


def test_the_header_parser_names_the_key_or_nothing() -> None:
    assert key_from_authorization("Bearer abc") == key_from_authorization("token abc") == "abc"
    assert key_from_authorization("Basic abc") is None and key_from_authorization("") is None
    for bad in ("Bearer", "Bearer a b"):
        with pytest.raises(ValueError):
            key_from_authorization(bad)
