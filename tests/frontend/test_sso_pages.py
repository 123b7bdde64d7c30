"""The login page with and without single sign-on, and its failures shown on the login page with
the reason and a 4xx/5xx, never a 500 page: a provider that does not answer, a callback without
the login it belongs to, a user who refused at the provider. (Logins that work:
tests/frontend/test_sso_browser.py, through a real provider.)"""

from __future__ import annotations

from typing import Any

import pytest

from stacktools.ready import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def sso_on(settings: Any) -> None:
    settings.OIDC = {**settings.OIDC, "ISSUER": f"http://127.0.0.1:{free_port()}", "CLIENT_ID": "gpupool",
                     "CLIENT_SECRET": "s", "TIMEOUT_S": 2}


def test_without_single_sign_on_the_login_page_offers_only_the_password(client: Any) -> None:
    page = client.get("/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    assert client.get("/login/sso/").status_code == 404


def test_with_single_sign_on_the_login_page_offers_it_and_keeps_where_to_go(client: Any, sso_on: None) -> None:
    page = client.get("/login/?next=/teams/vision/").content.decode()
    assert 'href="/login/sso/?next=/teams/vision/"' in page and "Sign in with SSO" in page
    assert 'name="password"' in page  # local accounts keep their form


def test_a_provider_that_does_not_answer_is_said_so(client: Any, sso_on: None) -> None:
    answer = client.get("/login/sso/")
    assert answer.status_code == 503
    assert "the identity provider did not answer" in answer.content.decode()


@pytest.mark.parametrize(("query", "status", "says"), [
    ("?code=abc&state=forged", 400, "mismatching_state"),
    ("?error=access_denied&error_description=End-User+aborted", 403, "the identity provider refused"),
])
def test_a_callback_that_is_not_a_login_is_refused(client: Any, sso_on: None, query: str, status: int,
                                                  says: str) -> None:
    answer = client.get(f"/login/sso/callback/{query}")
    assert answer.status_code == status
    assert says in answer.content.decode() and not answer.wsgi_request.user.is_authenticated
