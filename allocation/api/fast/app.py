"""The fast lease path: a WSGI application in front of Django's that answers the hot lease requests
itself and hands every other request, unchanged, to Django.

Measured (bench/bench_lease_path.py, flame graphs in bench/profiles/), most of a lease request's
web CPU was not the lease: Django's eight middleware, URL resolution, DRF's Request, content
negotiation, parsers, permission and throttle classes, the strict-input check, serializers with
per-field deep copies, then DRF's Response through the middleware again. Here a request costs a
path match, one orjson parse, a dict check (inputs.py), the cached token lookup, the service
call and one orjson render, with the services, selectors and renderer the generic path uses.

What it keeps exactly as the generic path has it:
- authentication: `Authorization: Token|Bearer KEY` through core.tokens.token_lookup (hashed
  keys, 5 s per-process cache, cleared where users and tokens change);
- permissions: a `read` token never writes (those requests go the generic way and get its 403);
- the per-user lease rate (allocation.api.throttles, the same Redis token bucket), taken only once
  the request is known to be one the fast path serves, so no request is counted twice;
- the services (allocation.services.leases): the partial unique index, the per-pool and per-queue
  locks, audit events, the outbox, idempotency keys, queue caps and budgets are theirs;
- the answers: bodies rendered by core.api.renderers.JSONRenderer from allocation.api.lease_json;
  errors raised by the services or the checks are rendered by core.api.errors.exception_handler,
  the API's one error body, with DRF's status, Retry-After and WWW-Authenticate; the headers the
  middleware (HSTS too, behind TLS) and DRF add (tests/api/test_lease_fast_path.py compares both
  paths request by request);
- the database connection's life: Django's request_started / request_finished signals, so
  CONN_MAX_AGE and the health checks work as for any request.

It declines (the generic path answers) whatever is not plainly one of its requests: a Host that
ALLOWED_HOSTS refuses, plain HTTP where SECURE_SSL_REDIRECT sends it to HTTPS, another method, a
query string, a body that is not a JSON object of the plain shapes, a session cookie
without a token, an Accept that is not JSON, an unknown or refused token (401s stay DRF's)."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from django.conf import settings
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.http.request import split_domain_port, validate_host
from rest_framework import exceptions

from allocation.api.fast import inputs
from allocation.api.lease_json import lease_dict, lease_dicts, lease_etag
from allocation.api.throttles import lease_rate_take
from allocation.selectors import as_lease_id
from allocation.services.leases import lease_create, lease_release, lease_renew
from core.api.errors import exception_handler
from core.api.renderers import JSONRenderer
from core.models import TokenScope
from core.tokens import key_from_authorization, token_lookup

logger = logging.getLogger("django.request")  # where Django logs the 4xx and 5xx it answers

Environ = dict[str, Any]
StartResponse = Callable[..., Any]

# The router's routes (pool.api.urls: an optional trailing slash; DRF's lookup is `[^/.]+`).
_LIST = re.compile(r"^/api/v1/leases/?$")
_DETAIL = re.compile(r"^/api/v1/leases/(?P<pk>[^/.]+)/?$")
_ACTION = re.compile(r"^/api/v1/leases/(?P<pk>[^/.]+)/(?P<action>release|renew)/?$")
# The headers every answer of these views carries on the generic path: DRF's (Vary, Allow per
# route) and the middleware's (SecurityMiddleware, XFrameOptionsMiddleware).
_COMMON = [("Vary", "Accept"), ("X-Frame-Options", "DENY"), ("X-Content-Type-Options", "nosniff"),
           ("Referrer-Policy", "same-origin"), ("Cross-Origin-Opener-Policy", "same-origin")]
_ALLOW = {"create": "GET, POST, HEAD, OPTIONS", "read": "GET, HEAD, OPTIONS", "release": "POST, OPTIONS",
          "renew": "POST, OPTIONS"}
_JSON_ACCEPTS = frozenset({"", "*/*", "application/json", "application/*"})
_LONG_NUMBER = re.compile(rb"\d{19}")  # core.api.renderers.JSONParser gives these to the stock parser
_STATUS_TEXT = {200: "200 OK", 201: "201 Created", 400: "400 Bad Request", 401: "401 Unauthorized",
                403: "403 Forbidden", 404: "404 Not Found", 409: "409 Conflict", 429: "429 Too Many Requests",
                503: "503 Service Unavailable"}
_RENDERER = JSONRenderer()


class _Decline(Exception):
    """Not a request for the fast path: the generic path answers it (nothing was done yet)."""


class FastLeaseApp:
    """WSGI: the hot lease requests here, everything else to `django_app`."""

    def __init__(self, django_app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self.django_app = django_app

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        route = _route(environ)
        if route is None:
            return self.django_app(environ, start_response)
        body = _read_body(environ)
        try:  # nothing is done until the request is known to be the fast path's
            user = _authenticated(environ, write=environ["REQUEST_METHOD"] == "POST")
            call = _prepared(route, environ, user, _parsed(environ, body))
        except _Decline:
            environ["wsgi.input"] = io.BytesIO(body)  # read here: handed on whole
            return self.django_app(environ, start_response)
        signals.request_started.send(sender=WSGIHandler, environ=environ)
        try:
            try:
                status, payload, headers = call()
            except Exception as exc:
                status, payload, headers = _error(exc, environ)
            out = [("Content-Type", "application/json"), *headers, ("Allow", _ALLOW[route[0]]), *_COMMON,
                   *_security_headers(environ),
                   ("Content-Length", str(len(payload)))]
            if status >= 400:
                logger.warning("%s: %s", _STATUS_TEXT.get(status, str(status)).partition(" ")[2],
                               environ.get("PATH_INFO", ""),
                               extra={"status_code": status})
            start_response(_STATUS_TEXT.get(status, f"{status} Error"), out)
            return [payload]
        finally:
            signals.request_finished.send(sender=WSGIHandler)


def _route(environ: Environ) -> tuple[str, str | None] | None:
    """(endpoint, lease id) of a request the fast path may serve; None for any other."""
    if environ.get("QUERY_STRING") or environ.get("HTTP_ACCEPT", "") not in _JSON_ACCEPTS:
        return None
    try:  # a body over the limit is the generic path's 413, decided from its length, unread
        if int(environ.get("CONTENT_LENGTH") or 0) > (settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 2**62):
            return None
    except ValueError:
        return None
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    if not path.startswith("/api/v1/leases") or not _host_allowed(environ):
        return None
    if getattr(settings, "SECURE_SSL_REDIRECT", False) and not _secure(environ):
        return None  # SecurityMiddleware redirects it to HTTPS
    # Only a lease id in the place of {id}: `leases/events/`, `leases/batch/` and any other
    # collection action are their views' (the router matches them before the detail route).
    if method == "POST":
        if _LIST.match(path):
            return "create", None
        match = _ACTION.match(path)
        return (match["action"], match["pk"]) if match and as_lease_id(match["pk"]) else None
    if method == "GET":
        match = _DETAIL.match(path)
        if match and as_lease_id(match["pk"]):
            return "read", match["pk"]
    return None


def _host_allowed(environ: Environ) -> bool:
    """Whether Django would take the request's Host (ALLOWED_HOSTS); a 400 is the generic path's."""
    domain, _port = split_domain_port(environ.get("HTTP_HOST") or environ.get("SERVER_NAME", ""))
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


def _secure(environ: Environ) -> bool:
    """HttpRequest.is_secure() for this environ (SECURE_PROXY_SSL_HEADER honoured)."""
    header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if header:
        name, value = header
        sent = environ.get(name)
        if sent is not None:
            return bool(sent.split(",", 1)[0].strip() == value)
    return bool(environ.get("wsgi.url_scheme") == "https")


def _security_headers(environ: Environ) -> list[tuple[str, str]]:
    """SecurityMiddleware's HSTS header, on secure requests where SECURE_HSTS_SECONDS is set."""
    seconds = getattr(settings, "SECURE_HSTS_SECONDS", 0)
    if not seconds or not _secure(environ):
        return []
    value = f"max-age={seconds}"
    if getattr(settings, "SECURE_HSTS_INCLUDE_SUBDOMAINS", False):
        value += "; includeSubDomains"
    if getattr(settings, "SECURE_HSTS_PRELOAD", False):
        value += "; preload"
    return [("Strict-Transport-Security", value)]


def _read_body(environ: Environ) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length <= 0:
        return b""
    return bytes(environ["wsgi.input"].read(length))


def _authenticated(environ: Environ, *, write: bool) -> Any:
    """The token's user; declines for no token, a refused one (DRF words the 401) or a read-only
    token that would write (DRF words the 403)."""
    try:
        key = key_from_authorization(environ.get("HTTP_AUTHORIZATION", ""))
    except ValueError:
        key = None
    if key is None:
        raise _Decline
    try:
        token = token_lookup(key)
    except Exception:  # refused, or the database failed: the generic path words it (401, 503)
        raise _Decline from None
    if write and token.scope == TokenScope.READ:
        raise _Decline
    return token.user


def _parsed(environ: Environ, body: bytes) -> Any:
    """The JSON body as core.api.renderers.JSONParser reads it, or a decline for whatever it would
    hand to the stock parser or to another parser."""
    if not body:
        return None
    content_type = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if content_type != "application/json" or "charset" in environ.get("CONTENT_TYPE", "").lower() \
            or _LONG_NUMBER.search(body):
        raise _Decline
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _Decline from None


Answer = tuple[int, bytes, list[tuple[str, str]]]


def _prepared(route: tuple[str, str | None], environ: Environ, user: Any, data: Any) -> Callable[[], Answer]:
    """The call that answers the request (its side effects start when it is called), once its
    input is known to be what the generic path would accept as it is; else a decline."""
    name, pk = route
    if name == "read":
        if data is not None:
            raise _Decline
        return lambda: _read(pk, user)
    if name == "create":
        fields = inputs.create_body(data)
        key = environ.get("HTTP_IDEMPOTENCY_KEY", "")
        if fields is None or len(key) > 255 or not key.isprintable():
            raise _Decline
        return lambda: _create(user, key, fields)
    if name == "release":
        release = inputs.release_body(data)
        if release is None:
            raise _Decline
        return lambda: (200, _RENDERER.render(lease_dict(lease_release(
            lease=pk, actor=user.username, visible_to=user, reason=release["reason"]))), [])
    renew = inputs.renew_body(data)
    if renew is None:
        raise _Decline
    return lambda: (200, _RENDERER.render(lease_dict(lease_renew(
        lease=pk, actor=user.username, visible_to=user, ttl_seconds=renew["ttl_seconds"], keep=False,
        user=user))), [])


def _read(pk: str | None, user: Any) -> Answer:
    found = lease_dicts([pk], visible_to=user)
    if not found:
        raise exceptions.NotFound()
    payload = _RENDERER.render(found[0])
    return 200, payload, [("ETag", f'"{lease_etag(payload)}"')]


def _create(user: Any, key: str, fields: dict[str, Any]) -> Answer:
    """LeaseViewSet.create after its checks: the user's lease rate (DRF checks throttles before
    the view), then the service."""
    allowed, wait = lease_rate_take(user)
    if not allowed:
        raise exceptions.Throttled(wait)
    lease, created = lease_create(user=user, idempotency_key=key, **fields)
    if created:  # a new lease holds no GPUs yet: nothing to read back
        return 201, _RENDERER.render(lease_dict(lease, gpus=[])), []
    return 200, _RENDERER.render(lease_dict(lease)), []


def _error(exc: Exception, environ: Environ) -> tuple[int, bytes, list[tuple[str, str]]]:
    """The API's error answer for `exc` (core.api.errors.exception_handler); an error it does not
    know is logged and answered as pool.health.server_error answers it."""
    response = exception_handler(exc, {"view": None, "request": None})
    if response is None:
        logger.error("Internal Server Error: %s", environ.get("PATH_INFO", ""), exc_info=exc,
                     extra={"status_code": 500})
        return 500, json.dumps({"code": "server_error", "message": "internal error; it has been logged"}).encode(), []
    headers = [(name, response[name]) for name in ("WWW-Authenticate", "Retry-After") if name in response]
    return response.status_code, _RENDERER.render(response.data), headers


def with_fast_leases(django_app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> Any:
    """`django_app` behind the fast lease path, or as it is with GPUPOOL_LEASE_FAST_PATH=0."""
    return FastLeaseApp(django_app) if settings.GPUPOOL.get("LEASE_FAST_PATH", True) else django_app
