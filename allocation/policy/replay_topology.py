"""The replay with racks: the fleet's hosts grouped into racks of N (in fleet order), and what
topology does to placement, measured. Pure, like replay.py.

`TopologyReplay(..., racks=…, aware=True)` gives every pass the racks (`Snapshot.topology`, one
level `rack`): multi-host gangs then prefer one rack (topology.py's default). `aware=False`
replays the same fleet topology-blind, measuring the same things, so both can be compared in
one run. Measured:
- `gangs`: multi-host gangs started; `gangs_in_one_rack` of them placed within one rack;
  `gangs_one_rack_possible` those for which some rack had room at the time they started
  ("where capacity allows"); `share_in_one_rack` and `share_in_one_rack_where_possible`.
- fragmentation, integrated over time: the largest free rack's GPUs (mean and minimum) and the
  number of racks wholly free (mean).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from allocation.policy.replay import Replay
from allocation.policy.topology import TopologyView
from allocation.policy.types import Decisions, GpuView, Grant, Snapshot

RACK = "rack"


def racks_of(fleet: Sequence[GpuView], rack_size: int) -> dict[str, str]:
    """Host -> rack: hosts in the order the fleet lists them, `rack_size` to a rack, per pool."""
    out: dict[str, str] = {}
    counts: dict[str, int] = defaultdict(int)
    for gpu in fleet:
        if gpu.host not in out:
            out[gpu.host] = f"{gpu.pool}/rack-{counts[gpu.pool] // rack_size}"
            counts[gpu.pool] += 1
    return out


class TopologyReplay(Replay):
    """A Replay that measures placement across racks (module docstring)."""

    def __init__(self, *args: Any, racks: Mapping[str, str], aware: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.topology = TopologyView((RACK,), {host: (rack,) for host, rack in racks.items()})
        if aware:
            self.policy = _with_topology(self.policy, self.topology)
        self.rack_of = {g.id: racks[g.host] for g in self.fleet}
        self.rack_capacity = Counter(self.rack_of[g.id] for g in self.fleet if g.schedulable)
        self.rack_held: Counter[str] = Counter()
        self.gangs = self.gangs_in_one_rack = self.gangs_possible = self.gangs_possible_in_one = 0
        self.largest_free_s = self.whole_free_s = self.measured_s = 0.0
        self.largest_free_min: int | None = None

    def _start(self, grant: Grant, t: float) -> None:
        req = self.pending[grant.lease_id]
        if not req.same_host:
            free = {rack: cap - self.rack_held[rack] for rack, cap in self.rack_capacity.items()}
            possible = max(free.values(), default=0) >= req.gpus
            one = len({self.rack_of[g] for g in grant.gpu_ids}) == 1
            self.gangs += 1
            self.gangs_in_one_rack += one
            self.gangs_possible += possible
            self.gangs_possible_in_one += possible and one
        super()._start(grant, t)
        self.rack_held.update(self.rack_of[g] for g in grant.gpu_ids)

    def _event(self, kind: int, lease_id: str, t: float) -> bool:
        run = self.running.get(lease_id)
        changed = super()._event(kind, lease_id, t)
        if run is not None and lease_id not in self.running:
            self.rack_held.subtract(self.rack_of[g] for g in run.gpu_ids)
        return changed

    def _advance(self, t: float) -> None:
        dt = t - self.clock
        if dt > 0 and self.rack_capacity:
            free = [cap - self.rack_held[rack] for rack, cap in self.rack_capacity.items()]
            largest = max(free)
            self.largest_free_s += largest * dt
            self.whole_free_s += sum(1 for rack, cap in self.rack_capacity.items()
                                     if self.rack_held[rack] == 0) * dt
            self.measured_s += dt
            self.largest_free_min = largest if self.largest_free_min is None else min(largest,
                                                                                      self.largest_free_min)
        super()._advance(t)

    def _result(self, end: float) -> dict[str, Any]:
        result = super()._result(end)
        span = self.measured_s or 1.0
        result["topology"] = {
            "racks": len(self.rack_capacity),
            "gangs": self.gangs,
            "gangs_in_one_rack": self.gangs_in_one_rack,
            "gangs_one_rack_possible": self.gangs_possible,
            "share_in_one_rack": round(self.gangs_in_one_rack / self.gangs, 4) if self.gangs else None,
            "share_in_one_rack_where_possible": round(self.gangs_possible_in_one / self.gangs_possible, 4)
            if self.gangs_possible else None,
            "largest_free_rack_gpus": {"mean": round(self.largest_free_s / span, 3),
                                       "min": self.largest_free_min or 0},
            "whole_free_racks_mean": round(self.whole_free_s / span, 3),
        }
        return result


def _with_topology(policy: Callable[[Snapshot], Decisions],
                   topology: TopologyView) -> Callable[[Snapshot], Decisions]:
    def decide(snapshot: Snapshot) -> Decisions:
        return policy(replace(snapshot, topology=topology))

    return decide
