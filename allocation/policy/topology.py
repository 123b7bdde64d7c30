"""Topology as plain data: NVLink islands within a host, and the levels of the fleet above it.

Pure: no Django, no I/O (the placement over it is in topo_place.py).

* An *island* is a set of GPUs joined by NVLink or NVSwitch (inventory reads it from
  `nvidia-smi topo -m` over SSH, or from the `nvidia.com/gpu.clique` label on Kubernetes, where
  one island may span several nodes: multi-node NVLink). "" is a GPU in no known island: an
  island of its own.
* *Levels* (`topology: [zone, block, rack]` in the config, outermost first) are host label keys;
  a host's value at a level names the rack (block, zone) it is in; "" is unknown, in none.
* A lease asks `topology: {within: LEVEL, mode: required|preferred}` where LEVEL is `nvlink`,
  `host` or one of the configured levels. `required` waits rather than place it across;
  `preferred` places it within one when it can, else anywhere it fits.

Defaults without an explicit `within` (so that topology pays off without users asking): a
multi-GPU lease on one host prefers one island (the GPUs it takes on its host are picked by
`pick_ids`); a multi-host lease prefers the innermost configured level (one rack).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NVLINK = "nvlink"
HOST = "host"
REQUIRED = "required"
PREFERRED = "preferred"
MODES = (REQUIRED, PREFERRED)
#: The keys of a lease's `topology` object.
KEYS = ("within", "mode")


@dataclass(frozen=True)
class TopologyView:
    """The topology of a snapshot: `levels` outermost first, each host's value at every level
    (`hosts`, missing hosts: unknown at all levels) and each GPU's island (`islands`, by
    GpuView id; missing: none)."""

    levels: tuple[str, ...] = ()
    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    islands: Mapping[int, str] = field(default_factory=dict)

    def domain(self, host: str, within: str) -> str:
        """The host's rack (block, zone…) at level `within`: "" when it is unknown."""
        try:
            at = self.levels.index(within)
        except ValueError:
            return ""
        values = self.hosts.get(host, ())
        return values[at] if at < len(values) else ""


def known_levels(levels: Sequence[str]) -> tuple[str, ...]:
    """Every `within` a lease may name, innermost first."""
    return (NVLINK, HOST, *reversed(tuple(levels)))


def resolve_level(within: object, levels: Sequence[str]) -> str | None:
    """The level a lease's `within` names: `nvlink`, `host`, a configured level's label key, or
    that key's last segment when only one level has it (`zone` for
    `topology.kubernetes.io/zone`); None when it names none."""
    if not isinstance(within, str):
        return None
    if within in (NVLINK, HOST) or within in levels:
        return within
    short = [level for level in levels if level.rsplit("/", 1)[-1] == within]
    return short[0] if len(short) == 1 else None


def effective(within: str, required: bool, same_host: bool, levels: Sequence[str]) -> tuple[str, bool]:
    """(within, required) as placement applies them: the lease's own, else the default (a
    multi-host lease prefers the innermost level; a same-host lease's island preference is
    applied when its GPUs are picked, see `pick_ids`)."""
    if within:
        return within, required
    if not same_host and levels:
        return levels[-1], False
    return "", False


def topology_problems(data: Any, levels: Sequence[str]) -> list[str]:
    """What is wrong with a lease's `topology` object, in words (empty when it is fine)."""
    if data is None:
        return []
    if not isinstance(data, Mapping):
        return ["must be an object with 'within' and optionally 'mode'"]
    problems = [f"unknown key {key!r} (known: {', '.join(KEYS)})" for key in data if key not in KEYS]
    within = data.get("within")
    known = known_levels(levels)
    if resolve_level(within, levels) is None:
        problems.append(f"'within' must be one of {', '.join(known)} (the pool's configured levels are "
                        f"{', '.join(levels) or 'none'}); got {within!r}")
    mode = data.get("mode", PREFERRED)
    if mode not in MODES:
        problems.append(f"'mode' must be one of {', '.join(MODES)}; got {mode!r}")
    return problems


def parse_short(text: str) -> dict[str, str]:
    """The CLI's `LEVEL[:MODE]` (`rack`, `nvlink:required`) as a topology object."""
    within, _, mode = text.partition(":")
    return {"within": within.strip(), "mode": mode.strip() or PREFERRED}


def pick_ids(free: Sequence[int], count: int, islands: Mapping[int, str]) -> list[int]:
    """`count` of a host's free GPU ids (ascending), within one NVLink island when one holds
    them: the smallest such island (best fit, so whole islands stay free for larger leases);
    else from the largest islands first (fewest islands). Ids in no island are islands of one."""
    by_island: dict[str, list[int]] = {}
    for gpu in free:
        by_island.setdefault(islands.get(gpu) or f"#{gpu}", []).append(gpu)
    if len(by_island) == 1:
        return list(free[:count])
    fits = [ids for ids in by_island.values() if len(ids) >= count]
    if fits:
        return min(fits, key=len)[:count]
    out: list[int] = []
    for ids in sorted(by_island.values(), key=len, reverse=True):
        out.extend(ids[: count - len(out)])
        if len(out) == count:
            break
    return sorted(out)


def largest_island(free: Sequence[int], islands: Mapping[int, str]) -> int:
    """The most free GPUs of one island among `free` (1 for GPUs in no island)."""
    counts: dict[str, int] = {}
    for gpu in free:
        key = islands.get(gpu) or f"#{gpu}"
        counts[key] = counts.get(key, 0) + 1
    return max(counts.values(), default=0)
