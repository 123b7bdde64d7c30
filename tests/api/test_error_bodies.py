"""Every error under /api/ is JSON `{code, message}`: unknown URLs, wrong methods, wrong media
types, bodies over the limit, bad credentials, missing permissions. Never an HTML page."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db


def _assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert body["code"] == code and body["message"], body
    return body


def test_an_unknown_url_under_the_api_is_a_json_404(world: Any, api: Any) -> None:
    _assert_error(api(world.member).get("/api/v1/nothing-here/"), 404, "not_found")
    _assert_error(api().get("/api/v2/pools/"), 404, "not_found")


def test_a_missing_object_is_a_json_404_even_with_a_malformed_key(world: Any, api: Any) -> None:
    _assert_error(api(world.member).get("/api/v1/leases/not-a-uuid/"), 404, "not_found")
    _assert_error(api(world.member).get("/api/v1/hosts/99999/"), 404, "not_found")
    _assert_error(api(world.member).get("/api/v1/hosts/abc/"), 404, "not_found")


def test_a_wrong_method_is_a_json_405_with_an_allow_header(world: Any, api: Any) -> None:
    response = api(world.member).delete(f"/api/v1/leases/{world.lease_id}/")
    _assert_error(response, 405, "method_not_allowed")
    assert "GET" in response["Allow"]
    _assert_error(api(world.admin).put(f"/api/v1/quotas/{world.quota_id}/", {"limit": 3}, format="json"),
                  405, "method_not_allowed")


def test_a_body_that_is_not_json_is_a_json_415(world: Any, api: Any) -> None:
    response = api(world.member).post("/api/v1/leases/", "pool=training&gpus=1", content_type="text/plain")
    _assert_error(response, 415, "unsupported_media_type")


def test_a_body_over_one_mebibyte_is_a_json_413_not_a_400_or_500(world: Any, api: Any) -> None:
    big = '{"pool": "training", "gpus": 1, "model": "' + "x" * (1024 * 1024 + 10) + '"}'
    body = _assert_error(api(world.member).post("/api/v1/leases/", big, content_type="application/json"),
                         413, "request_too_large")
    assert "1048576" in body["message"]


def test_a_bad_token_is_a_json_401_with_a_challenge(world: Any) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = client.get("/api/v1/pools/")
    _assert_error(response, 401, "authentication_failed")
    assert response["WWW-Authenticate"].startswith("Token")


def test_an_admin_action_by_a_member_is_a_json_403(world: Any, api: Any) -> None:
    _assert_error(api(world.member).post(f"/api/v1/hosts/{world.host_id}/drain/"), 403, "permission_denied")


def test_bad_filter_and_pagination_values_are_json_400s_naming_the_parameter(world: Any, api: Any) -> None:
    client = api(world.member)
    for url, name in (("/api/v1/gpus/?limit=ten", "limit"), ("/api/v1/gpus/?offset=-1", "offset"),
                      ("/api/v1/leases/?active=maybe", "active"), ("/api/v1/gpus/?pool=", "pool"),
                      ("/api/v1/gpus/?min_memory_mb=0.5", "min_memory_mb")):
        body = _assert_error(client.get(url), 400, "invalid")
        assert name in body["details"], (url, body)


def test_session_auth_without_a_csrf_token_is_a_json_403(world: Any) -> None:
    from rest_framework.test import APIClient

    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.member)
    assert client.get("/api/v1/pools/").status_code == 200
    response = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json")
    _assert_error(response, 403, "permission_denied")
    assert "CSRF" in response.json()["message"]
