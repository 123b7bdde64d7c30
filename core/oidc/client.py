"""gpupool as an OpenID Connect client, through authlib: discovery, the dashboard's authorization
code flow (PKCE S256, state and nonce kept in the Django session), the ID token checked against the
provider's JWKS (signature, issuer, audience, expiry, nonce; an unknown key id fetches the key set
again, so key rotation needs nothing), completed by the userinfo endpoint.

Every call to the provider is bounded by `OIDC["TIMEOUT_S"]`; its failures become DomainErrors
with a code (`sso_unavailable` when the provider cannot be reached, `sso_failed` when it answers
wrongly, `sso_denied` when the user or the provider said no), never a 500. The discovery document
is read again at most hourly.

The device flow for the CLI is in core/oidc/device.py, on the same client.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests
from authlib.integrations.base_client import OAuthError
from authlib.integrations.django_client import OAuth
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from joserfc.errors import JoseError

from core.errors import DomainError, NotFound

DISCOVERY_PATH = "/.well-known/openid-configuration"
METADATA_TTL_S = 3600  # the discovery document is fetched again after this (endpoints may move)


class OidcError(DomainError):
    """The identity provider's answer cannot log anybody in (`code` says why)."""

    status = 400
    code = "sso_failed"


class OidcDenied(OidcError):
    status = 403
    code = "sso_denied"


class OidcUnavailable(OidcError):
    status = 503
    code = "sso_unavailable"


class OidcDisabled(NotFound):
    code = "sso_disabled"


@dataclass(frozen=True)
class Login:
    """Who the provider says logged in: its `issuer` (from discovery) and the claims of the
    verified ID token, completed by the userinfo endpoint's (same `sub`)."""

    issuer: str
    claims: dict[str, Any]

    @property
    def subject(self) -> str:
        return str(self.claims["sub"])


def oidc_enabled() -> bool:
    """Whether single sign-on is configured (GPUPOOL_OIDC_ISSUER)."""
    return bool(settings.OIDC["ISSUER"])


def discovery_url(issuer: str) -> str:
    """The discovery document of `issuer`; a URL that already names one is taken as it is."""
    issuer = issuer.strip()
    return issuer if issuer.endswith(DISCOVERY_PATH) else issuer.rstrip("/") + DISCOVERY_PATH


def auth_method() -> str:
    """How gpupool authenticates at the token endpoint: the client secret in the Basic header
    (the default every provider supports), or none for a public client (PKCE alone)."""
    return "client_secret_basic" if settings.OIDC["CLIENT_SECRET"] else "none"


def oidc_app() -> Any:
    """The authlib client for the configured provider (an authlib DjangoOAuth2App). Raises
    OidcDisabled when single sign-on is off."""
    cfg = settings.OIDC
    if not cfg["ISSUER"] or not cfg["CLIENT_ID"]:
        raise OidcDisabled("single sign-on is not configured on this server (GPUPOOL_OIDC_ISSUER)")
    return _app(cfg["ISSUER"], cfg["CLIENT_ID"], cfg["CLIENT_SECRET"], cfg["SCOPES"], float(cfg["TIMEOUT_S"]),
                int(time.time() // METADATA_TTL_S))


@functools.lru_cache(maxsize=2)
def _app(issuer: str, client_id: str, secret: str | None, scopes: str, timeout: float, epoch: int) -> Any:
    """One client per configuration and hour: authlib keeps the discovery document (and the key
    set) on the client, so a new hour's client reads them again. `epoch` only keys the cache."""
    registry = OAuth()
    return registry.register(
        "gpupool", client_id=client_id, client_secret=secret or None, server_metadata_url=discovery_url(issuer),
        client_kwargs={"scope": scopes, "code_challenge_method": "S256", "default_timeout": timeout,
                       "token_endpoint_auth_method": auth_method()})


@contextmanager
def provider_calls(what: str) -> Iterator[None]:
    """Turn what a call to the provider may raise into OidcErrors whose message starts with `what`."""
    try:
        yield
    except OAuthError as exc:
        detail = f"{exc.error}" + (f": {exc.description}" if exc.description else "")
        if exc.error == "access_denied":
            raise OidcDenied(f"{what}: the identity provider refused ({detail})") from None
        raise OidcError(f"{what}: {detail}") from None
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise OidcUnavailable(f"{what}: the identity provider did not answer ({type(exc).__name__})") from None
    except requests.HTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        error = OidcUnavailable if isinstance(status, int) and status >= 500 else OidcError
        raise error(f"{what}: the identity provider answered HTTP {status}") from None
    except (JoseError, requests.RequestException, ValueError, KeyError) as exc:
        raise OidcError(f"{what}: {type(exc).__name__}: {exc}") from None


def metadata(app: Any) -> dict[str, Any]:
    """The provider's discovery document (fetched once per client)."""
    with provider_calls("reading the identity provider's discovery document"):
        data: dict[str, Any] = app.load_server_metadata()
    if not data.get("issuer"):
        raise OidcError(f"the discovery document at {discovery_url(str(settings.OIDC['ISSUER']))} names no issuer")
    return data


def login_redirect(request: HttpRequest, redirect_uri: str) -> HttpResponse:
    """The redirect to the provider's authorization endpoint; state, nonce and the PKCE verifier
    wait in the session for `login_finish`."""
    app = oidc_app()
    metadata(app)
    with provider_calls("starting the login"):
        response: HttpResponse = app.authorize_redirect(request, redirect_uri)
    return response


def login_finish(request: HttpRequest) -> Login:
    """The login the provider's redirect back carries (code exchanged, ID token verified against
    the state, nonce and verifier kept by `login_redirect`). Raises OidcError."""
    app = oidc_app()
    with provider_calls("finishing the login"):
        token = app.authorize_access_token(request)
    if "userinfo" not in token:
        raise OidcError("the identity provider returned no ID token (is 'openid' among GPUPOOL_OIDC_SCOPES?)")
    return completed_login(app, token, token["userinfo"])


def completed_login(app: Any, token: dict[str, Any], id_claims: dict[str, Any]) -> Login:
    """The ID token's claims with the userinfo endpoint's added (groups are often only there).
    A userinfo answer about another subject is refused."""
    meta = metadata(app)
    claims = dict(id_claims)
    if meta.get("userinfo_endpoint") and token.get("access_token"):
        with provider_calls("reading the userinfo endpoint"):
            info = dict(app.userinfo(token=token))
        if str(info.get("sub")) != str(claims.get("sub")):
            raise OidcError("the userinfo endpoint answered for another subject than the ID token")
        claims.update(info)
    if not claims.get("sub"):
        raise OidcError("the ID token names no subject (sub)")
    return Login(issuer=str(meta["issuer"]), claims=claims)
