"""The free GPUs of a pool before a pass, kept per layout and patched between passes.

`FreeIndex` (placement.py) needs, per kind, each host's free GPUs and the hosts bucketed by how
many are free. Building that is O(GPUs) per pass. When the same GPU tuple comes back with a few
running leases changed (the simulator), only the hosts of the GPUs that changed hands are
recomputed. Every bucket keeps its hosts in the layout's host order, exactly as a fresh build
would, so best-fit ties break the same way whether the base was patched or built: the result
of a pass depends on the snapshot alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from allocation.policy.matching import PoolLayout


class FreeBase:
    def __init__(self, layout: PoolLayout, held: set[int]) -> None:
        self.layout = layout
        self.generation = -1  # of the running totals it reflects (running.RunningTotals)
        self.rank = {kid: {h: i for i, h in enumerate(hosts)}
                     for kid, hosts in layout.capacity.items()}
        self.blocks: dict[int, dict[str, list[int]]] = {}
        self.buckets: dict[int, list[dict[str, None]]] = {}
        self.free_total: dict[int, int] = {}
        for kid, hosts in layout.capacity.items():
            buckets: list[dict[str, None]] = [{} for _ in range(layout.max_block[kid] + 1)]
            blocks: dict[str, list[int]] = {}
            total = 0
            for host, ids in hosts.items():
                free = list(ids) if held.isdisjoint(ids) else [g for g in ids if g not in held]
                if free:
                    blocks[host] = free
                    buckets[len(free)][host] = None
                    total += len(free)
            self.blocks[kid], self.buckets[kid], self.free_total[kid] = blocks, buckets, total

    def patch(self, held: set[int], where: dict[int, tuple[str, str, int]],
              changed: Iterable[int]) -> None:
        """Recompute the hosts of the `changed` GPUs against the new `held` set."""
        capacity, name = self.layout.capacity, self.layout.name
        touched = set()
        for gid in changed:
            loc = where.get(gid)
            if loc is not None and loc[0] == name and loc[1] in capacity.get(loc[2], ()):
                touched.add((loc[1], loc[2]))
        for host, kid in touched:
            free = [g for g in capacity[kid][host] if g not in held]
            blocks, buckets = self.blocks[kid], self.buckets[kid]
            old = len(blocks.get(host, ()))
            if free:
                blocks[host] = free
            else:
                blocks.pop(host, None)
            if old == len(free):
                continue
            if old:
                del buckets[old][host]
            if free:
                bucket = buckets[len(free)]
                rank = self.rank[kid]
                if not bucket or rank[next(reversed(bucket))] < rank[host]:
                    bucket[host] = None  # appending keeps the layout's order
                else:
                    bucket[host] = None
                    buckets[len(free)] = dict.fromkeys(sorted(bucket, key=rank.__getitem__))
            self.free_total[kid] += len(free) - old
