"""Template variables every dashboard page needs."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from core.roles import is_pool_admin


def roles(request: HttpRequest) -> dict[str, Any]:
    """`is_pool_admin` for templates: the same rule as the API and the views, never re-spelled."""
    return {"is_pool_admin": is_pool_admin(getattr(request, "user", None))}
