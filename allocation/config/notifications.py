"""`notifications:` section: webhook and e-mail targets of lease, budget and idle events
(allocation.notify). The checks of a target are allocation.notify_vocabulary's, shared with the API."""

from __future__ import annotations

from typing import Any

from allocation.config.positions import Checker
from allocation.config.specs import Config, NotificationSpec
from allocation.notify_vocabulary import (
    DEFAULT_EXPIRING_BEFORE_S,
    DEFAULT_GRANTED_AFTER_S,
    WEBHOOK,
    event_list,
    recipients,
    target_problems,
    teams_problem,
)

NOTIFICATION_KEYS = {"name", "kind", "url", "to", "events", "teams", "secret", "secret_env", "granted_after_s",
                     "expiring_before_s"}


def check_notification(chk: Checker, path: tuple[Any, ...], item: dict[str, Any], seen: set[Any],
                       cfg: Config) -> None:
    if not chk.keys(path, item, NOTIFICATION_KEYS, {"name", "kind", "events"}):
        return
    name = chk.name((*path, "name"), item["name"], "notification name")
    label = f"notification {item['name']!r}"
    problems = target_problems(item)
    teams = item.get("teams", [])
    if (problem := teams_problem(teams)) is not None:
        problems.append(("teams", problem))
    for key, problem in problems:
        chk.error((*path, key) if key in item else path, f"{label}: {problem}")
    if not name or problems:
        return
    chk.unique(path, seen, name, "notification")
    webhook = item["kind"] == WEBHOOK
    cfg.notifications.append(NotificationSpec(
        name=name, kind=item["kind"], events=tuple(event_list(item["events"])),
        url=item["url"] if webhook else "", to=() if webhook else tuple(recipients(item["to"])[0]),
        teams=tuple(sorted(set(teams))), secret=item.get("secret"), secret_env=item.get("secret_env") or "",
        granted_after_s=float(item.get("granted_after_s", DEFAULT_GRANTED_AFTER_S)),
        expiring_before_s=float(item.get("expiring_before_s", DEFAULT_EXPIRING_BEFORE_S))))
