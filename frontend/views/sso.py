"""The login page, and the dashboard's single sign-on: "Sign in with SSO" sends the browser to the
identity provider (core.oidc.client: authorization code with PKCE), which sends it back to the
callback; the login becomes a user with its teams and role (allocation.services.sso) and lands
where it was going (`next`). A failed login shows the login page again with the reason, never a 500.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from allocation.services.sso import sso_login
from core.errors import DomainError
from core.oidc.client import login_finish, login_redirect, oidc_enabled

logger = logging.getLogger("gpupool.sso")

NEXT_KEY = "gpupool_sso_next"
# Sessions of a single sign-on are Django's own, through the model backend (the user's row).
BACKEND = "django.contrib.auth.backends.ModelBackend"


def sso_context() -> dict[str, Any]:
    """What the login page needs to offer single sign-on (nothing when it is off)."""
    return {"sso_enabled": oidc_enabled(), "sso_label": settings.OIDC["LABEL"]}


class LoginPage(LoginView):
    """Django's login form, with "Sign in with SSO" beside it where single sign-on is on."""

    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **sso_context()}


def _safe_next(request: HttpRequest, target: str) -> str:
    ok = url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                         require_https=request.is_secure())
    return target if target and ok else settings.LOGIN_REDIRECT_URL


def _redirect_uri(request: HttpRequest) -> str:
    return settings.OIDC["REDIRECT_URI"] or request.build_absolute_uri(reverse("frontend:sso-callback"))


def _refused(request: HttpRequest, error: DomainError) -> HttpResponse:
    logger.info("single sign-on refused (%s): %s", error.code, error.message)
    context = {"form": AuthenticationForm(request), "sso_error": error.message,
               "next": request.session.get(NEXT_KEY, ""), **sso_context()}
    return render(request, "frontend/login.html", context, status=error.status)


@require_GET
def sso_start(request: HttpRequest) -> HttpResponse:
    """To the identity provider, remembering where to land afterwards."""
    request.session[NEXT_KEY] = _safe_next(request, request.GET.get("next", ""))
    try:
        return login_redirect(request, _redirect_uri(request))
    except DomainError as error:
        return _refused(request, error)


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    """Back from the identity provider: log the user in, or say why not."""
    try:
        done = login_finish(request)
        result = sso_login(issuer=done.issuer, claims=done.claims, via="dashboard")
    except DomainError as error:
        return _refused(request, error)
    target = _safe_next(request, request.session.pop(NEXT_KEY, ""))
    login(request, result.user, backend=BACKEND)  # a new session key: nothing of before carries over
    return HttpResponseRedirect(target)
