"""`notifications:` of the configuration into rows, and back (allocation.config.apply calls these in
its one transaction). Only configured targets (`user` null) are the file's: users' own
subscriptions are never touched by `apply`, `--prune` or `export`.

Secrets: `secret` is stored encrypted (inventory.secrets) and never exported; a file without one
keeps the stored one (as for sources' keys), so an exported file applies with no change. `secret_env`
is a name, exported as is."""

from __future__ import annotations

from typing import Any

from allocation.config import Config
from allocation.config.specs import NotificationSpec
from allocation.models import Notification
from allocation.notify_vocabulary import DEFAULT_EXPIRING_BEFORE_S, DEFAULT_GRANTED_AFTER_S, WEBHOOK
from inventory.secrets import decrypt, encrypt


def check_notification_teams(cfg: Config, teams: set[str]) -> list[str]:
    """The teams a notification names that neither the database nor the file define."""
    return [f"notification {n.name!r}: team {t!r} is not defined" for n in cfg.notifications
            for t in n.teams if t not in teams]


def _values(spec: NotificationSpec) -> dict[str, Any]:
    return {"kind": spec.kind, "url": spec.url, "to": list(spec.to), "events": list(spec.events),
            "teams": list(spec.teams), "secret_env": spec.secret_env, "granted_after_s": spec.granted_after_s,
            "expiring_before_s": spec.expiring_before_s}


def apply_notifications(cfg: Config, changes: list[str]) -> None:
    """Create or update the file's notifications. A target a receiver disabled (410 Gone) is
    enabled again: the file says it should be sent to."""
    rows = {n.name: n for n in Notification.objects.filter(user__isnull=True)}
    for spec in cfg.notifications:
        values = _values(spec)
        row = rows.get(spec.name)
        if row is None:
            Notification.objects.create(name=spec.name, secret=encrypt(spec.secret or ""), **values)
            what = spec.url if spec.kind == WEBHOOK else ", ".join(spec.to)
            changes.append(f"+ notification {spec.name} ({spec.kind} {what}): {', '.join(spec.events)}")
            continue
        diffs = [f"{k} {getattr(row, k)!r} → {v!r}" for k, v in values.items() if getattr(row, k) != v]
        for key, value in values.items():
            setattr(row, key, value)
        if spec.secret is not None and decrypt(row.secret) != spec.secret:
            row.secret = encrypt(spec.secret)
            diffs.append("secret replaced")
        if spec.secret_env and row.secret:
            row.secret = ""  # the environment variable holds it from now on
            diffs.append("stored secret dropped for secret_env")
        if not row.enabled:
            row.enabled, row.disabled_reason = True, ""
            diffs.append("enabled again")
        if diffs:
            row.save()
            changes.append(f"~ notification {spec.name}: " + ", ".join(diffs))


def prune_notifications(cfg: Config) -> list[str]:
    """Delete the configured notifications the file does not name (their delivery log stays)."""
    keep = {n.name for n in cfg.notifications}
    changes = []
    for row in Notification.objects.filter(user__isnull=True).exclude(name__in=keep):
        row.delete()
        changes.append(f"- notification {row.name}")
    return changes


def export_notifications() -> list[dict[str, Any]]:
    out = []
    for row in Notification.objects.filter(user__isnull=True).order_by("name"):
        item: dict[str, Any] = {"name": row.name, "kind": row.kind}
        if row.kind == WEBHOOK:
            item["url"] = row.url
        else:
            item["to"] = row.to[0] if len(row.to) == 1 else list(row.to)
        item["events"] = list(row.events)
        if row.teams:
            item["teams"] = list(row.teams)
        if row.secret_env:
            item["secret_env"] = row.secret_env
        if row.granted_after_s != DEFAULT_GRANTED_AFTER_S:
            item["granted_after_s"] = _number(row.granted_after_s)
        if row.expiring_before_s != DEFAULT_EXPIRING_BEFORE_S:
            item["expiring_before_s"] = _number(row.expiring_before_s)
        out.append(item)
    return out


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value

