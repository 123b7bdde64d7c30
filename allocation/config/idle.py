"""`idle_reclaim:` of a pool or a priority class: `{below_util_pct, for_s, warn_s}` (all three
required; null or absent: no idle reclaim)."""

from __future__ import annotations

from typing import Any

from allocation.config.positions import Checker
from allocation.policy.idle import IdleReclaim

IDLE_KEYS = ("below_util_pct", "for_s", "warn_s")


def check_idle_reclaim(chk: Checker, path: tuple[Any, ...], value: Any) -> tuple[bool, IdleReclaim | None]:
    """(valid, the rule): (True, None) for null; errors are recorded in `chk` at the field."""
    if value is None:
        return True, None
    if not isinstance(value, dict):
        chk.error(path, "idle_reclaim must be a mapping of " + ", ".join(IDLE_KEYS))
        return False, None
    if not chk.keys(path, value, set(IDLE_KEYS), set(IDLE_KEYS)):
        return False, None
    errors = len(chk.errors)
    below = chk.number((*path, "below_util_pct"), value["below_util_pct"], "idle_reclaim.below_util_pct",
                       positive=False)
    if below is not None and not 0 <= below <= 100:
        chk.error((*path, "below_util_pct"), f"idle_reclaim.below_util_pct must be within [0, 100], got {below:g}")
    for_s = chk.number((*path, "for_s"), value["for_s"], "idle_reclaim.for_s")
    warn_s = chk.number((*path, "warn_s"), value["warn_s"], "idle_reclaim.warn_s", positive=False)
    if warn_s is not None and warn_s < 0:
        chk.error((*path, "warn_s"), f"idle_reclaim.warn_s must be ≥ 0, got {warn_s:g}")
    if len(chk.errors) != errors or below is None or for_s is None or warn_s is None:
        return False, None
    return True, IdleReclaim(below, for_s, warn_s)


def idle_reclaim_export(rule: IdleReclaim | None) -> dict[str, Any] | None:
    """The rule as the file writes it (whole numbers as integers); None for none."""
    if rule is None:
        return None
    return {key: int(v) if float(v).is_integer() else v
            for key, v in zip(IDLE_KEYS, (rule.below_util_pct, rule.for_s, rule.warn_s), strict=True)}
