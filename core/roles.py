"""Who is a pool admin: the one definition the API, the dashboard, the services and the templates use."""

from __future__ import annotations

from typing import Any


def is_pool_admin(user: Any) -> bool:
    """Pool admins move capacity, cordon and drain hosts, edit quotas and see every team's leases."""
    return bool(user is not None and getattr(user, "is_authenticated", False)
                and (getattr(user, "is_staff", False) or getattr(user, "is_superuser", False)))
