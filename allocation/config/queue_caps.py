"""`queue_caps:` of a pool: `{pending_leases_per_team, pending_gpus_per_team}`, each a whole
number ≥ 1 or null (no cap). Absent, or a key left out: the default
(`allocation.policy.admission.DEFAULT_QUEUE_CAPS`: 1,000 pending leases per team, no cap on
GPUs). Export writes the section only where it differs from the default, so a file without it
round-trips."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from allocation.config.positions import Checker
from allocation.policy.admission import DEFAULT_QUEUE_CAPS, QueueCaps

QUEUE_CAP_KEYS = tuple(f.name for f in fields(QueueCaps))
_MOST = 2**31 - 1  # the column's range


def check_queue_caps(chk: Checker, path: tuple[Any, ...], value: Any) -> tuple[bool, QueueCaps]:
    """(valid, the caps): the defaults for null or absent; errors are recorded in `chk` at the
    field."""
    if value is None:
        return True, DEFAULT_QUEUE_CAPS
    if not isinstance(value, dict):
        chk.error(path, "queue_caps must be a mapping of " + ", ".join(QUEUE_CAP_KEYS))
        return False, DEFAULT_QUEUE_CAPS
    if not chk.keys(path, value, set(QUEUE_CAP_KEYS), set()):
        return False, DEFAULT_QUEUE_CAPS
    errors = len(chk.errors)
    caps = asdict(DEFAULT_QUEUE_CAPS)
    for key in QUEUE_CAP_KEYS:
        if key not in value:
            continue
        cap = chk.integer((*path, key), value[key], f"queue_caps.{key}", minimum=1, nullable=True)
        if cap is not None and cap > _MOST:
            chk.error((*path, key), f"queue_caps.{key} must be at most {_MOST}, got {cap}")
        caps[key] = cap
    return len(chk.errors) == errors, QueueCaps(**caps)


def queue_caps_export(caps: QueueCaps) -> dict[str, Any] | None:
    """The caps as the file writes them (both keys); None for the defaults."""
    return None if caps == DEFAULT_QUEUE_CAPS else asdict(caps)
