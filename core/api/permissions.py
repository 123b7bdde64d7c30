from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

from core.models import TokenScope
from core.roles import is_pool_admin

__all__ = ["IsPoolAdmin", "TokenScopeAllows", "is_pool_admin"]


class IsPoolAdmin(BasePermission):
    """Pool admins move capacity, cordon and drain hosts, edit quotas."""

    message = "only pool admins may do this"

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_pool_admin(request.user)


class TokenScopeAllows(BasePermission):
    """A `read` token may only read (GET, HEAD, OPTIONS): dashboards and CI get tokens that cannot
    change anything. Sessions and `write` tokens pass. The base viewset checks it before any view's own permissions
    (so no action can drop it); DEFAULT_PERMISSION_CLASSES carries it for any other DRF view."""

    message = "this token is read-only: it may only use GET, HEAD and OPTIONS"
    code = "read_only_token"

    def has_permission(self, request: Any, view: Any) -> bool:
        scope = getattr(request.auth, "scope", None)
        return scope != TokenScope.READ or request.method in SAFE_METHODS
