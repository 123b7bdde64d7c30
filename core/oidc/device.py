"""The CLI's login: the OAuth 2.0 device authorization grant (RFC 8628), with gpupool as the client.

The CLI talks to gpupool only. `device_start` asks the provider's device authorization endpoint
for a user code (authenticated as gpupool's confidential client, so no client secret ever
reaches a user's machine) and hands the CLI what RFC 8628 §3.2 answers, with one change: the
`device_code` it returns is gpupool's own handle, the provider's device code signed with
SECRET_KEY together with the issuer, the client id and the deadline. `device_finish` redeems a
handle at the provider's token endpoint (once; the provider consumes the code) and verifies the
ID token exactly as the dashboard's login does. No state is kept between the two calls, so any
web process answers either.
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

from authlib.integrations.base_client import OAuthError
from authlib.integrations.requests_client import OAuth2Session
from django.conf import settings
from django.core import signing

from core.oidc.client import (
    Login,
    OidcDenied,
    OidcError,
    auth_method,
    completed_login,
    metadata,
    oidc_app,
    provider_calls,
)

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
SALT = "gpupool.sso.device"
DEFAULT_INTERVAL_S = 5  # RFC 8628 §3.2: when the provider names none
WAITING = ("authorization_pending", "slow_down")


class DeviceWaiting(OidcError):
    """The user has not finished at the provider yet: `authorization_pending`, or `slow_down`
    (poll less often). RFC 8628 §3.5's codes, passed on."""

    code = "authorization_pending"


class DeviceExpired(OidcError):
    code = "expired_token"


def _session() -> OAuth2Session:
    cfg = settings.OIDC
    return OAuth2Session(client_id=cfg["CLIENT_ID"], client_secret=cfg["CLIENT_SECRET"] or None,
                         token_endpoint_auth_method=auth_method(), default_timeout=float(cfg["TIMEOUT_S"]))


def device_start() -> dict[str, Any]:
    """Start a device login at the provider: `{device_code, user_code, verification_uri,
    verification_uri_complete?, expires_in, interval}`. Raises OidcError (code
    `sso_device_unsupported` when the provider offers no device endpoint)."""
    app = oidc_app()
    meta = metadata(app)
    endpoint = meta.get("device_authorization_endpoint")
    if not endpoint:
        raise OidcError("the identity provider offers no device authorization endpoint: `login --sso` needs "
                        "the device authorization grant (RFC 8628) enabled for gpupool's client",
                        code="sso_device_unsupported")
    with provider_calls("starting the device login"), _session() as session:
        response = session.post(endpoint, data={"scope": settings.OIDC["SCOPES"]}, withhold_token=True,
                                auth=session.client_auth(auth_method()))
        answer = response.json()
        if "error" in answer:
            raise OAuthError(error=answer["error"], description=answer.get("error_description"))
        response.raise_for_status()
    try:
        expires_in = int(answer["expires_in"])
        started = {"user_code": str(answer["user_code"]),
                   # Google's endpoint says verification_url (its name before RFC 8628).
                   "verification_uri": str(answer.get("verification_uri") or answer["verification_url"]),
                   "expires_in": expires_in, "interval": int(answer.get("interval") or DEFAULT_INTERVAL_S)}
        device_code = str(answer["device_code"])
    except (KeyError, TypeError, ValueError):
        raise OidcError("the identity provider's device authorization answer lacks a required field") from None
    if answer.get("verification_uri_complete"):
        started["verification_uri_complete"] = str(answer["verification_uri_complete"])
    handle = signing.dumps({"d": device_code, "i": meta["issuer"], "c": settings.OIDC["CLIENT_ID"],
                            "e": int(time.time()) + expires_in}, salt=SALT, compress=True)
    return {"device_code": handle, **started}


def _open(handle: str, issuer: str) -> str:
    """The provider's device code inside a handle of `device_start`; refuses a forged handle, one
    of another provider or client, and an expired one."""
    try:
        payload = signing.loads(handle, salt=SALT)
    except signing.BadSignature:
        raise OidcError("this device_code was not issued by this server", code="invalid_grant") from None
    if payload.get("i") != issuer or payload.get("c") != settings.OIDC["CLIENT_ID"]:
        raise OidcError("this device_code was issued for another identity provider or client; start again",
                        code="invalid_grant")
    if int(payload.get("e", 0)) < time.time():
        raise DeviceExpired("the device login has expired; start again")
    return str(payload["d"])


def _refuse(exc: OAuthError) -> NoReturn:
    """The token endpoint's refusal of a device code as the error the CLI acts on."""
    if exc.error in WAITING:
        raise DeviceWaiting("the user has not finished signing in at the identity provider yet",
                            code=exc.error) from None
    if exc.error == "expired_token":
        raise DeviceExpired("the device login has expired; start again") from None
    if exc.error == "access_denied":
        raise OidcDenied("the sign-in was refused at the identity provider", code="access_denied") from None
    raise OidcError(f"the identity provider refused the device code: {exc.error}", code="invalid_grant") from None


def device_finish(handle: str) -> Login:
    """The login a device flow ended in. Raises DeviceWaiting while the user has not finished,
    DeviceExpired, OidcDenied when the user refused, OidcError otherwise."""
    app = oidc_app()
    meta = metadata(app)
    device_code = _open(handle, str(meta["issuer"]))
    with provider_calls("redeeming the device code"), _session() as session:
        try:
            token = session.fetch_token(meta["token_endpoint"], grant_type=DEVICE_GRANT, device_code=device_code)
        except OAuthError as exc:
            _refuse(exc)
    if "id_token" not in token:
        raise OidcError("the identity provider returned no ID token (is 'openid' among GPUPOOL_OIDC_SCOPES?)")
    with provider_calls("verifying the ID token"):
        # No nonce in this grant; the token came straight from the provider's token endpoint.
        id_claims = dict(app.parse_id_token(token, nonce=None))
    return completed_login(app, token, id_claims)
