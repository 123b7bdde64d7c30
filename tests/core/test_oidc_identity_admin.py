"""Pool admins see which provider account each user signs in as, and unlink one by deleting it
(docs/sso.md: the way to re-link a user); nobody adds or edits one there."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from core.models import OidcIdentity

pytestmark = pytest.mark.django_db


def test_a_pool_admin_sees_and_unlinks_an_identity(client: Any, make_user: Any) -> None:
    identity = OidcIdentity.objects.create(user=make_user("alice"), issuer="https://idp.example.org",
                                           subject="sub-alice")
    client.force_login(make_user("root", admin=True))
    listing = client.get(reverse("admin:core_oidcidentity_changelist"), {"q": "alice"})
    assert listing.status_code == 200 and "sub-alice" in listing.content.decode()
    assert client.get(reverse("admin:core_oidcidentity_add")).status_code == 403

    deleted = client.post(reverse("admin:core_oidcidentity_delete", args=[identity.pk]), {"post": "yes"})
    assert deleted.status_code == 302 and not OidcIdentity.objects.exists()


def test_members_are_kept_out(client: Any, make_user: Any) -> None:
    client.force_login(make_user("alice"))
    response = client.get(reverse("admin:core_oidcidentity_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
