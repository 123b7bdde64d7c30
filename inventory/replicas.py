"""Time-sliced replicas per physical GPU, as the API and the dashboard show them.

A time-sliced GPU is advertised as N replicas (Gpu rows with `shared_replicas` N) that share it
without isolation, so the scheduler lets one team at a time use them (unless the pool shares
across teams). What they share, the *unit*, is the physical GPU where we know it
(`Gpu.physical_uuid`: ssh hosts), else the node's whole set of time-sliced GPUs (Kubernetes:
the device plugin, not us, picks the physical device for each pod). The summary says how many
replicas the unit has, how many are leased and by which teams: "GPU-…: 4 replicas, 2 leased by
team vision".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from inventory.models import Gpu

UnitKey = tuple[str, int]  # (physical uuid, 0), or ("", host id) where the physical GPU is unknown


def unit_key(physical_uuid: str, host_id: int) -> UnitKey:
    return (physical_uuid, 0) if physical_uuid else ("", host_id)


@dataclass(frozen=True)
class ReplicaSummary:
    """One unit's replicas. `teams`: the teams holding some that the reader may see, by name;
    `others`: some are held by a team the reader may not see."""

    unit: str  # the physical GPU's uuid, or "node NAME"
    replicas: int
    leased: int
    teams: tuple[str, ...] = ()
    others: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "replicas": self.replicas, "leased": self.leased, "teams": list(self.teams)}

    def __str__(self) -> str:
        text = f"{self.unit}: {self.replicas} replicas, {self.leased} leased"
        holders = [f"team {', '.join(self.teams)}"] if self.teams else []
        holders += ["another team"] if self.others else []
        return f"{text} by {' and '.join(holders)}" if holders and self.leased else text


# A replica as the summaries need it: (gpu id, physical uuid, host id, host name, leased).
Member = tuple[int, str, int, str, bool]


def unit_members(keys: Collection[UnitKey]) -> list[Member]:
    """Every replica (not gone) of these units, in one query; [] for no keys."""
    if not keys:
        return []
    physical = [p for p, _ in keys if p]
    hosts = [h for p, h in keys if not p]
    where = Q(physical_uuid__in=physical) | Q(physical_uuid="", host_id__in=hosts)
    return list(Gpu.objects.filter(where, gone=False, shared_replicas__gt=1).values_list(
        "id", "physical_uuid", "host_id", "host__name", "leased"))


def summarise(members: Iterable[Member], teams: Mapping[int, str]) -> dict[UnitKey, ReplicaSummary]:
    """The summary of each unit of `members`. `teams`: the holding team of leased replicas, ""
    for a team the reader may not see (a leased replica missing from it counts as such)."""
    units: dict[UnitKey, list[Member]] = {}
    for member in members:
        units.setdefault(unit_key(member[1], member[2]), []).append(member)
    out = {}
    for key, rows in units.items():
        holders = [teams.get(gid, "") for gid, _, _, _, leased in rows if leased]
        label = key[0] or f"node {rows[0][3]}"
        out[key] = ReplicaSummary(label, len(rows), len(holders), tuple(sorted({t for t in holders if t})),
                                  "" in holders)
    return out
