"""Single sign-on in a real browser through a real OpenID Provider (tests/support/oidc.py:
node-oidc-provider, its login form, discovery, JWKS, code flow with PKCE): the groups claim gives
the team and the admin role, and a group removed at the provider removes the membership at the
next login. Nothing of the client library is mocked."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from allocation.models import SsoMembership
from core.models import OidcIdentity
from tests.frontend.browser import needs_chromium, shoot

pytestmark = [pytest.mark.browser, needs_chromium]

CONFIG = """
pools: [{name: training}]
teams:
  - {name: vision}
  - {name: nlp}
  - {name: ops, members: [alice]}
sso:
  username_claim: preferred_username
  groups_claim: groups
  teams: {ml-vision: vision, ml-nlp: nlp}
  admins: [gpu-admins]
"""


@pytest.fixture
def sso(oidc_provider: Any, settings: Any, apply_yaml: Any) -> Any:
    apply_yaml(CONFIG, discover=False)
    settings.OIDC = oidc_provider.settings()
    oidc_provider.set_groups("alice", ["ml-vision"])
    oidc_provider.set_groups("root", ["gpu-admins"])
    return oidc_provider


def sign_in_at_provider(page: Any, login: str) -> None:
    """The provider's own login form (not gpupool's)."""
    assert page.title() == "Sign in to the test IdP", page.url
    page.get_by_label("Username").fill(login)
    page.get_by_label("Password").fill(f"pw-{login}")
    page.get_by_role("button", name="Sign in").click()


def sso_login(page: Any, base: str, path: str, login: str | None) -> None:
    """From `path` (a login-required page) through "Sign in with SSO"; `login` None: the provider
    still has a session, so it asks nothing."""
    page.goto(f"{base}{path}")
    assert "/login/" in page.url
    page.get_by_role("link", name="Sign in with SSO").click()
    if login is not None:
        sign_in_at_provider(page, login)
    page.wait_for_url(f"{base}{path}")


def log_out(page: Any) -> None:
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r"/login/"))


def test_a_member_signs_in_through_the_provider_and_lands_on_the_teams_view(
        live_server: Any, sso: Any, page: Any, artifacts: Any) -> None:
    base = live_server.url
    page.goto(f"{base}/teams/vision/")
    assert "/login/" in page.url
    shoot(page, artifacts / "screenshots", "login-sso")

    sso_login(page, base, "/teams/vision/", "alice")

    assert page.locator(".who").inner_text() == "alice"
    assert "vision" in page.locator("h1").inner_text()
    alice = get_user_model().objects.get(username="alice")
    assert set(alice.teams.values_list("name", flat=True)) == {"vision", "ops"}  # ops: the config's
    assert not alice.has_usable_password()
    identity = OidcIdentity.objects.get(user=alice)
    assert (identity.issuer, identity.subject) == (sso.issuer, "sub-alice-0001")
    assert page.locator(".role").count() == 0  # not an admin
    assert page.goto(f"{base}/teams/nlp/").status == 404  # not a member of nlp


def test_a_group_removed_at_the_provider_removes_the_membership_at_the_next_login(
        live_server: Any, sso: Any, page: Any) -> None:
    base = live_server.url
    sso_login(page, base, "/teams/vision/", "alice")
    log_out(page)

    sso.set_groups("alice", ["ml-nlp"])  # at the IdP: moved from ml-vision to ml-nlp
    sso_login(page, base, "/teams/nlp/", None)  # the provider's session: no form this time

    alice = get_user_model().objects.get(username="alice")
    assert set(alice.teams.values_list("name", flat=True)) == {"nlp", "ops"}  # ops, given by the config, stays
    assert list(SsoMembership.objects.filter(user=alice).values_list("team__name", flat=True)) == ["nlp"]
    assert page.goto(f"{base}/teams/vision/").status == 404


def test_a_user_whose_group_maps_to_admin_is_a_pool_admin(live_server: Any, sso: Any, page: Any) -> None:
    base = live_server.url
    sso_login(page, base, "/capacity/", "root")  # an admin-only page

    assert page.locator(".role").inner_text() == "admin"
    assert page.locator("nav").get_by_role("link", name="Capacity").count() == 1
    root = get_user_model().objects.get(username="root")
    assert root.is_staff and OidcIdentity.objects.get(user=root).granted_admin
    log_out(page)

    sso.set_groups("root", [])  # no longer in gpu-admins: the role goes at the next login
    sso_login(page, base, "/", None)
    assert page.locator(".role").count() == 0
    assert page.goto(f"{base}/capacity/").status == 403


def test_a_local_account_with_a_password_is_not_taken_over(live_server: Any, sso: Any, page: Any) -> None:
    local = get_user_model().objects.get(username="alice")  # made by the config's `members:`
    local.set_password("a local password")  # now a local account
    local.save()
    base = live_server.url
    page.goto(f"{base}/login/")
    page.get_by_role("link", name="Sign in with SSO").click()
    sign_in_at_provider(page, "alice")

    page.wait_for_url(re.compile(r"/login/sso/callback/"))
    assert "local gpupool account with a password" in page.get_by_role("alert").inner_text()
    assert not OidcIdentity.objects.exists()
    assert page.get_by_label("Password").is_visible()  # the password form is still offered
