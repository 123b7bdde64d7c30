"""A user's own notification subscriptions (the API's `notifications/subscriptions/`, the CLI's
`gpupool notify`): what a user may ask for, checked as the configuration's targets are
(allocation.notify_vocabulary), plus what only a user's subscription needs: e-mail goes to the
user's own address only (admins: any), so that nobody can mail strangers through gpupool."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from allocation.models import Notification
from allocation.notify_vocabulary import (
    DEFAULT_EXPIRING_BEFORE_S,
    DEFAULT_GRANTED_AFTER_S,
    EMAIL,
    event_list,
    recipients,
    target_problems,
)
from core.errors import DomainError, Forbidden
from core.roles import is_pool_admin
from inventory.secrets import encrypt


def subscription_put(*, user: Any, name: str, kind: str, events: list[str], url: str | None = None,
                     to: list[str] | str | None = None, secret: str | None = None,
                     granted_after_s: float | None = None, expiring_before_s: float | None = None
                     ) -> tuple[Notification, bool]:
    """Create the user's subscription `name`, or replace it whole (a client may send the same
    request again: `gpupool notify` does); returns (it, created). An e-mail subscription without
    `to` goes to the user's address. DomainError (400 `invalid`, `details` by field) for a bad
    target; Forbidden (`not_your_address`) for another's address."""
    if kind == EMAIL and to is None:
        to = [user.email] if user.email else None
    spec = {"kind": kind, "url": url, "to": to, "events": events, "secret": secret,
            "granted_after_s": granted_after_s, "expiring_before_s": expiring_before_s}
    problems = target_problems(spec)
    if problems:
        details = {key: [problem] for key, problem in problems}
        raise DomainError("; ".join(problem for _, problem in problems), details=details)
    addresses = recipients(to)[0] if kind == EMAIL else []
    if addresses and not is_pool_admin(user) and {a.lower() for a in addresses} != {user.email.lower()}:
        raise Forbidden("an e-mail subscription goes to your own address only", code="not_your_address")
    values = {"kind": kind, "url": url or "", "to": addresses, "events": event_list(events),
              "secret": encrypt(secret or ""), "secret_env": "", "teams": [],
              "granted_after_s": DEFAULT_GRANTED_AFTER_S if granted_after_s is None else float(granted_after_s),
              "expiring_before_s": DEFAULT_EXPIRING_BEFORE_S if expiring_before_s is None else float(expiring_before_s),
              "enabled": True, "disabled_reason": ""}
    with transaction.atomic():
        return Notification.objects.update_or_create(user=user, name=name, defaults=values)


def subscription_delete(*, subscription: Notification) -> None:
    """Remove a subscription; its delivery log stays (without it)."""
    subscription.delete()


def notifications_enable(*, ids: list[int], actor: str) -> int:
    """Enable targets a 410 disabled (an admin's action), audited; returns how many changed."""
    from allocation.audit import audit

    changed = 0
    for row in Notification.objects.filter(pk__in=ids, enabled=False):
        row.enabled, reason, row.disabled_reason = True, row.disabled_reason, ""
        row.save(update_fields=["enabled", "disabled_reason"])
        audit(actor=actor, action="notification.enable", obj=row, message=f"enabled {row} again (was: {reason})",
              data={"was": reason}).save()
        changed += 1
    return changed
