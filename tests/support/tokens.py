"""The one way tests and benches get an API key: a fresh `write` token (unless told otherwise)
issued through the service, as `manage.py apitoken` does. Each call gives a new key."""

from __future__ import annotations

from datetime import timedelta
from typing import Any


def api_key(user: Any, *, scope: str = "write", expires_in: timedelta | None = None) -> str:
    from core.tokens import token_issue

    return token_issue(user=user, name="test", scope=scope, expires_in=expires_in)
