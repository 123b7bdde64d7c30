"""The pool's topology for a pass (allocation.policy.topology.TopologyView): each GPU's NVLink
island and each host's value at every configured level (`topology:` of the configuration).

Host labels are read only when levels are configured; a pool with neither islands nor levels
gets None (the pass is topology-blind, at no cost)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from allocation.policy.topology import TopologyView


def topology_view(levels: Sequence[str], islands: Mapping[int, tuple[int, str]], names: Mapping[int, str],
                  labels: Callable[[], Mapping[int, Mapping[str, Any]]]) -> TopologyView | None:
    """`islands`: GPU id -> (host id, island as stored); `names`: host id -> the host's name in
    the policy; `labels`: reads host id -> labels (called only when levels are configured).
    A host-local island (`nvl0`) is qualified by its host; a fleet-wide one (`clique:ID`) not."""
    by_gpu = {gpu: island if ":" in island else f"{names[host]}/{island}"
              for gpu, (host, island) in islands.items() if island and host in names}
    if not levels and not by_gpu:
        return None
    hosts: dict[str, tuple[str, ...]] = {}
    if levels:
        for host_id, values in labels().items():
            if host_id in names:
                hosts[names[host_id]] = tuple(str((values or {}).get(level, "")) for level in levels)
    return TopologyView(tuple(levels), hosts, by_gpu)
