"""The `topology:` section: the levels above hosts, outermost first, each a host label key.

    topology: [topology.kubernetes.io/zone, block, rack]

A host's value of each key (Kubernetes node labels, `labels:` of ssh hosts) names its zone,
block or rack; a lease's `topology.within` names a level by its key (or `nvlink`, `host`).
Pure: no Django (apply_topology.py writes it)."""

from __future__ import annotations

from typing import Any

from allocation.config.positions import Checker
from allocation.config.specs import Config
from allocation.policy.topology import HOST, NVLINK

MAX_LEVELS = 8
RESERVED = (NVLINK, HOST)


def check_topology(chk: Checker, value: Any, cfg: Config) -> None:
    """`topology:` as a list of distinct label keys (absent: None, left as it is)."""
    if value is None:
        return
    path = ("topology",)
    if not isinstance(value, list):
        chk.error(path, "topology must be a list of host label keys, outermost first (e.g. [zone, block, rack])")
        return
    errors = len(chk.errors)
    if len(value) > MAX_LEVELS:
        chk.error(path, f"topology has {len(value)} levels; at most {MAX_LEVELS}")
    seen: set[str] = set()
    for i, key in enumerate(value):
        if not isinstance(key, str) or not key.strip() or len(key) > 317 or key != key.strip():
            chk.error((*path, i), "a topology level must be a host label key (text, no surrounding spaces)")
        elif key in RESERVED:
            chk.error((*path, i), f"'{key}' is a built-in level (nvlink, host): name the levels above hosts")
        elif key in seen:
            chk.error((*path, i), f"topology level '{key}' is listed twice")
        else:
            seen.add(key)
    if len(chk.errors) == errors:
        cfg.topology = list(value)
