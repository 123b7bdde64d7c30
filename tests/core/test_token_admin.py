"""Pool admins see API tokens in the Django admin (prefix, user, scope, expiry, last use,
revocation) and revoke them; no key or digest ever appears, and nobody adds or edits one there."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from core.models import ApiToken
from tests.support.tokens import api_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(client: Any, make_user: Any) -> Any:
    client.force_login(make_user("root", admin=True))
    return client


def test_the_list_and_the_page_show_prefixes_never_keys_or_digests(admin_client_: Any, make_user: Any) -> None:
    key = api_key(make_user("alice"), scope="read")
    token = ApiToken.objects.get(user__username="alice")
    pages = [admin_client_.get(reverse("admin:core_apitoken_changelist")),
             admin_client_.get(reverse("admin:core_apitoken_change", args=[token.pk]))]
    for page in pages:
        text = page.content.decode()
        assert page.status_code == 200 and token.prefix in text
        assert key not in text and token.digest not in text
    assert admin_client_.get(reverse("admin:core_apitoken_add")).status_code == 403


def test_the_revoke_action_revokes_the_selected_tokens(admin_client_: Any, make_user: Any) -> None:
    from rest_framework.test import APIClient

    key = api_key(make_user("alice"))
    token = ApiToken.objects.get(user__username="alice")
    response = admin_client_.post(reverse("admin:core_apitoken_changelist"),
                                  {"action": "revoke", "_selected_action": [token.pk]})
    assert response.status_code == 302
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/pools/").json()["code"] == "token_revoked"


def test_members_are_kept_out(client: Any, make_user: Any) -> None:
    client.force_login(make_user("alice"))
    response = client.get(reverse("admin:core_apitoken_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
