from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission


def is_pool_admin(user: Any) -> bool:
    return bool(user and user.is_authenticated and (user.is_staff or user.is_superuser))


class IsPoolAdmin(BasePermission):
    """Pool admins move capacity, cordon and drain hosts, edit quotas."""

    message = "only pool admins may do this"

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_pool_admin(request.user)
