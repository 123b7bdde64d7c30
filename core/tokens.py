"""API tokens: issue, look up, revoke. The one place that knows how a key maps to a user.

A key is shown once, by `token_issue`; only its SHA-256 digest is stored. `token_lookup` keeps the
tokens it accepted in a process-local cache for TTL_S (5 s), keyed by digest (never by the key), so
a hot client costs no SQL to identify. Hence a token revoked, a user deactivated or a changed
`is_staff` takes effect within TTL_S in every process, and at once in the process that made the
change (saving or deleting a user or token clears this process's cache, see core/apps.py). Refused
keys are never cached: each costs one indexed query.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from core.errors import Conflict, DomainError, NotFound
from core.models import ApiToken, TokenScope

logger = logging.getLogger("gpupool.tokens")  # prefixes only: a key or digest is never logged

TTL_S = 5.0
MAX_ENTRIES = 10_000  # tokens of distinct clients within TTL_S; past it the cache starts over
PREFIX_LEN = 8
LAST_USED_EVERY = timedelta(minutes=1)  # last_used_at is written at most this often per token
MAX_NAME_LEN = 100

_cache: dict[str, tuple[float, tuple[Any, ...], tuple[Any, ...]]] = {}
_lock = threading.Lock()


class TokenRefused(DomainError):
    """A key that does not authenticate. `code`: `invalid_token` (unknown key or inactive user),
    `token_expired` or `token_revoked`."""

    status = 401
    code = "invalid_token"


# `Authorization: Token KEY` (DRF's word) and `Authorization: Bearer KEY` (RFC 6750, what OAuth
# clients and most HTTP tools send) name the same key.
AUTH_SCHEMES = ("token", "bearer")


def key_from_authorization(header: str) -> str | None:
    """The key of an `Authorization` header in one of AUTH_SCHEMES (any case); None for another
    scheme or none. Raises ValueError for one of ours that is not `SCHEME KEY` (no key, or spaces
    in it)."""
    parts = header.split()
    if not parts or parts[0].lower() not in AUTH_SCHEMES:
        return None
    if len(parts) != 2:
        raise ValueError("no key" if len(parts) == 1 else "the key contains spaces")
    return parts[1]


def token_digest(key: str) -> str:
    """The stored form of a key: SHA-256, hex."""
    return hashlib.sha256(key.encode()).hexdigest()


def token_issue(*, user: Any, name: str = "", scope: str = TokenScope.WRITE,
                expires_in: timedelta | None = None) -> str:
    """A new token for `user`; returns its key, which is stored nowhere (only its digest is).

    `scope`: `write` (every method) or `read` (safe methods only); `expires_in`: None = never.
    Raises DomainError (code `invalid`, the field named) for an unknown scope, a name over 100
    characters or a non-positive lifetime; nothing is stored then."""
    if scope not in TokenScope.values:
        raise DomainError(f"scope must be one of {', '.join(TokenScope.values)}, not {scope!r}",
                          details={"scope": ["unknown scope"]})
    if len(name) > MAX_NAME_LEN:
        raise DomainError(f"name is longer than {MAX_NAME_LEN} characters", details={"name": ["too long"]})
    if expires_in is not None and expires_in <= timedelta(0):
        raise DomainError("expires_in must be positive", details={"expires_in": ["must be positive"]})
    key = _new_key()
    now = timezone.now()
    ApiToken.objects.create(user=user, name=name, prefix=key[:PREFIX_LEN], digest=token_digest(key),
                            scope=scope, created_at=now,
                            expires_at=now + expires_in if expires_in is not None else None)
    logger.info("API token %s… (%s) issued to user %s", key[:PREFIX_LEN], scope, user.pk)
    return key


def _new_key() -> str:
    """32 random bytes, URL-safe. Never one starting with "-": `gpupool login --token -x…` and
    `manage.py` commands would read it as an option (1 key in 64 did, failing CLI runs at random)."""
    while (key := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return key


def token_revoke(*, token: ApiToken, by: str = "") -> bool:
    """Revoke `token` from now on (within TTL_S in other processes); `by` names who did, for the
    log. Idempotent: False when it was already revoked."""
    changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    clear_token_cache()  # update() sends no signal
    token.refresh_from_db(fields=["revoked_at"])
    if changed:
        logger.info("API token %s… of user %s revoked by %s", token.prefix, token.user_id, by or "a command")
    return bool(changed)


def token_by_prefix(prefix: str) -> ApiToken:
    """The one token whose prefix starts `prefix` (a whole key also names its token). Raises
    NotFound when none matches, Conflict when several do."""
    prefix = prefix.strip()
    if len(prefix) > PREFIX_LEN:
        token = ApiToken.objects.filter(digest=token_digest(prefix)).first()
        if token is not None:
            return token
        prefix = prefix[:PREFIX_LEN]
    if not prefix:
        raise NotFound("no token prefix given", details={"prefix": ["required"]})
    matches = list(ApiToken.objects.select_related("user").filter(prefix__startswith=prefix)[:2])
    if not matches:
        raise NotFound(f"no token starts with {prefix!r}", details={"prefix": ["unknown"]})
    if len(matches) > 1:
        raise Conflict(f"several tokens start with {prefix!r}: give more characters",
                       details={"prefix": ["ambiguous"]})
    return matches[0]


def token_lookup(key: str) -> ApiToken:
    """The live token of `key`, with `.user` set (an active user). Raises TokenRefused otherwise.

    Cached per process for TTL_S (see the module docstring); each call returns fresh instances,
    never one shared between threads. Expiry is checked on every call, cached or not."""
    digest = token_digest(key)
    now = timezone.now()
    hit = _cache.get(digest)
    if hit is not None and hit[0] > time.monotonic():
        cached: ApiToken = _rebuild(ApiToken, hit[2])
        cached.user = _rebuild(get_user_model(), hit[1])
        _refuse_expired(cached, now)
        return cached
    token = ApiToken.objects.select_related("user").filter(digest=digest).first()
    if token is None or not token.user.is_active:
        raise TokenRefused("Invalid token.")
    if token.revoked_at is not None:
        raise TokenRefused("this token was revoked", code="token_revoked")
    _refuse_expired(token, now)
    _touch(token, now)
    with _lock:
        if len(_cache) >= MAX_ENTRIES:
            _cache.clear()
        _cache[digest] = (time.monotonic() + TTL_S, _row(token.user), _row(token))
    return token


def clear_token_cache(**kwargs: Any) -> None:
    """Forget every cached token of this process (signal receiver; also for tests)."""
    with _lock:
        _cache.clear()


def _refuse_expired(token: ApiToken, now: Any) -> None:
    if token.is_expired(now):
        raise TokenRefused("this token has expired", code="token_expired")


def _touch(token: ApiToken, now: Any) -> None:
    """Record use at most once per LAST_USED_EVERY: a conditional update, so concurrent requests
    and processes write it once between them, and no signal (the cache stays)."""
    if token.last_used_at is not None and token.last_used_at > now - LAST_USED_EVERY:
        return
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_EVERY)).update(last_used_at=now)
    token.last_used_at = now


def _row(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.attname) for f in obj._meta.concrete_fields)


def _rebuild(model: Any, row: tuple[Any, ...]) -> Any:
    return model.from_db("default", [f.attname for f in model._meta.concrete_fields], row)
