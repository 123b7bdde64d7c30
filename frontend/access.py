"""Who may see and do what in the dashboard, and the HTMX plumbing the views share.

Reads follow the API: members see their teams' leases and quotas, pool admins see everything.
Admin actions answer 403 to members even when reached by URL, so hiding a button is never the
only guard.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.cache import patch_vary_headers

from core.roles import is_pool_admin

View = Callable[..., HttpResponse]


def is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def htmx_target(request: HttpRequest) -> str:
    """The id of the element an HTMX request will swap ("" for a plain request)."""
    return request.headers.get("HX-Target", "") if is_htmx(request) else ""


def login_required(view: View) -> View:
    """Like Django's, but an HTMX poll from an expired session redirects the whole page to the
    login form instead of swapping the login page into a fragment."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            target = f"{settings.LOGIN_URL}?next={quote(request.get_full_path())}"
            if is_htmx(request):
                response = HttpResponse(status=200)
                response["HX-Redirect"] = target
                return response
            return HttpResponseRedirect(target)
        response = view(request, *args, **kwargs)
        # The same URL answers a fragment to HTMX and a page otherwise: caches must tell them apart.
        patch_vary_headers(response, ["HX-Request", "HX-Target"])
        return response

    return wrapped


def admin_required(view: View) -> View:
    """Pool admins only: anonymous users go to the login form, members get 403."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_pool_admin(request.user):
            raise PermissionDenied("only pool admins may do this")
        return view(request, *args, **kwargs)

    return wrapped
