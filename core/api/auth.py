"""Token authentication with a short process-local cache, so a hot client costs no SQL to identify.

A token is looked up in the database at most once per TTL_S (5 seconds) per server process; in
between, the user is rebuilt from the cached row (a fresh instance per request, never shared
between threads). So a revoked token, a deactivated user or a changed `is_staff` takes effect
within TTL_S in every process, and at once in the process that made the change (saving or deleting
a user or token clears this process's cache). Unknown tokens are not cached: each costs a query.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

TTL_S = 5.0
MAX_ENTRIES = 10_000  # tokens of distinct clients within TTL_S; past it the cache starts over

_cache: dict[str, tuple[float, tuple[Any, ...], tuple[Any, ...]]] = {}
_lock = threading.Lock()


def _row(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.attname) for f in obj._meta.concrete_fields)


def _rebuild(model: Any, row: tuple[Any, ...]) -> Any:
    return model.from_db("default", [f.attname for f in model._meta.concrete_fields], row)


class CachedTokenAuthentication(TokenAuthentication):
    """DRF's `Authorization: Token <key>` with the cache above; failures are DRF's own (401)."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        hit = _cache.get(key)
        if hit is not None and hit[0] > time.monotonic():
            user = _rebuild(get_user_model(), hit[1])
            token = _rebuild(Token, hit[2])
            token.user = user
            return user, token
        user, token = super().authenticate_credentials(key)
        with _lock:
            if len(_cache) >= MAX_ENTRIES:
                _cache.clear()
            _cache[key] = (time.monotonic() + TTL_S, _row(user), _row(token))
        return user, token


def clear_token_cache(**kwargs: Any) -> None:
    """Forget every cached token of this process (signal receiver; also for tests)."""
    with _lock:
        _cache.clear()


# DRF imports this module when the first request authenticates, after the apps are ready.
for _model in (get_user_model(), Token):
    post_save.connect(clear_token_cache, sender=_model, dispatch_uid=f"token-cache-{_model.__name__}-save")
    post_delete.connect(clear_token_cache, sender=_model, dispatch_uid=f"token-cache-{_model.__name__}-delete")
