from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission

from core.roles import is_pool_admin

__all__ = ["IsPoolAdmin", "is_pool_admin"]


class IsPoolAdmin(BasePermission):
    """Pool admins move capacity, cordon and drain hosts, edit quotas."""

    message = "only pool admins may do this"

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_pool_admin(request.user)
