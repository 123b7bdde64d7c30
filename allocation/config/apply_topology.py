"""Apply and export the `topology:` section (allocation/config/topology.py checks it): stored on
the scheduler settings row, read by every pass (allocation/engine/topology.py)."""

from __future__ import annotations

from typing import Any

from allocation.config.specs import Config
from allocation.models import SchedulerSettings


def apply_topology(cfg: Config, changes: list[str]) -> None:
    if cfg.topology is None:
        return
    sched = SchedulerSettings.current()
    if list(sched.topology or []) == cfg.topology:
        return
    before = ", ".join(sched.topology or []) or "none"
    sched.topology = list(cfg.topology)
    sched.save()
    changes.append(f"~ topology: {before} -> {', '.join(cfg.topology) or 'none'}")


def export_topology(data: dict[str, Any]) -> None:
    """Add `topology` to an export when levels are set."""
    sched = SchedulerSettings.objects.filter(pk=1).first()
    if sched is not None and sched.topology:
        data["topology"] = list(sched.topology)
