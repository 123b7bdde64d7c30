"""Topology-aware placement over the free index (topology.py has the data and the words).

A pass whose snapshot carries a topology finds placements through `TopologyFits` instead of
the plain `FitMemo`: a lease that asks (or defaults) to stay within a level gets the best-fit
domain of that level (the rack, block, zone or NVLink island whose free matching GPUs hold it
with the fewest left over, so whole domains stay free for larger gangs), and within it the fewest
hosts. `required` returns None when no domain holds it (the lease waits, pending code
`topology`); `preferred` falls back to the topology-blind placement.

Cost: a domain search reads the free blocks of the request's groups once per state of the
index (cached by its version), so requests that wait in a row pay once; `FitMemo`'s rule (a shape
that did not fit never fits later in the pass) holds as well, the index only shrinking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from allocation.policy.fit_memo import FitMemo, exclusion_key
from allocation.policy.placement import Exclusions, FreeIndex, Group, Placement
from allocation.policy.topology import HOST, NVLINK, TopologyView, effective, largest_island
from allocation.policy.types import RequestView

_NO_HOSTS: frozenset[str] = frozenset()
# Per domain: its free GPUs, and its (host, kind id, free count) blocks.
_Domains = dict[str, tuple[int, list[tuple[str, int, int]]]]


class TopologyFits(FitMemo):
    """`FitMemo` whose placements honour the snapshot's topology."""

    __slots__ = ("_domains", "_hosts_at", "_islands", "topology")

    def __init__(self, topology: TopologyView) -> None:
        super().__init__()
        self.topology = topology
        self._domains: dict[tuple[int, str], _Domains] = {}
        self._hosts_at: dict[str, dict[str, str]] = {}  # level -> host -> its domain there
        # (kind id, host) -> (the free list it was worked out for, its largest free island)
        self._islands: dict[tuple[int, str], tuple[list[int], int]] = {}

    def find(self, index: FreeIndex, req: RequestView, groups: Sequence[Group],
             exclude: Exclusions | None = None) -> Placement | None:
        within, required = effective(req.within, req.within_required, req.same_host, self.topology.levels)
        if not within or (within == HOST and req.same_host):
            return super().find(index, req, groups, exclude)
        shape = (id(groups), req.same_host, within, required, None if exclude is None else exclusion_key(exclude))
        if self.hopeless(shape, req.gpus):
            return None
        placement = self.within(index, req, groups, within, exclude)
        if placement is None and not required:
            placement = index.find(groups, req.gpus, req.same_host, exclude)
        if placement is None:
            self.failed(shape, groups, req.gpus)
        return placement

    def within(self, index: FreeIndex, req: RequestView, groups: Sequence[Group], within: str,
               exclude: Exclusions | None) -> Placement | None:
        """The best placement of `req` within one domain of level `within`, or None."""
        if within == HOST:
            return index.find(groups, req.gpus, True, exclude)
        if within == NVLINK and req.same_host:
            return _island_fit(index, groups, req.gpus, exclude, self._largest_island)
        best: Placement | None = None
        for group in groups:
            domains = self._domains_of(index, group, within, exclude)
            found = _domain_fit(domains, req.gpus, int(group.time_sliced), req.same_host,
                                None if exclude else index)
            if found is not None and (best is None or found.score < best.score):
                best = found
        return best

    def _domains_of(self, index: FreeIndex, group: Group, within: str, exclude: Exclusions | None) -> _Domains:
        if exclude:  # rare (advance reservations): not cached
            return _domains(index, group, self._key_of(within), exclude)
        # Worked out once per pass: the index only shrinks within a pass, so the tallies stay
        # upper bounds, and `_domain_fit` refreshes a domain before it places anything there.
        key = (id(group), within)
        hit = self._domains.get(key)
        if hit is None:
            hit = self._domains[key] = _domains(index, group, self._key_of(within), None)
        return hit

    def _key_of(self, within: str) -> Callable[[str, list[int]], str]:
        topo = self.topology
        if within == NVLINK:  # multi-host: one multi-node NVLink domain (a GPU clique)
            return lambda host, ids: topo.islands.get(ids[0], "") if ids else ""
        hosts = self._hosts_at.get(within)
        if hosts is None:
            at = topo.levels.index(within)
            hosts = self._hosts_at[within] = {h: v[at] for h, v in topo.hosts.items() if at < len(v)}
        get = hosts.get
        return lambda host, ids: get(host, "")

    def _largest_island(self, kid: int, host: str, free: list[int]) -> int:
        """`largest_island` of a host's free block, remembered while the block stands (the
        index replaces a block's list on every change, never edits it)."""
        hit = self._islands.get((kid, host))
        if hit is not None and hit[0] is free:
            return hit[1]
        size = largest_island(free, self.topology.islands)
        self._islands[(kid, host)] = (free, size)
        return size


def _domains(index: FreeIndex, group: Group, key: Callable[[str, list[int]], str],
             exclude: Exclusions | None) -> _Domains:
    """The group's free blocks by domain; hosts in no domain ("" key) are left out."""
    totals: dict[str, int] = {}
    lists: dict[str, list[tuple[str, int, int]]] = {}
    for kid in group.kinds:
        banned = exclude.get(kid, _NO_HOSTS) if exclude else _NO_HOSTS
        if banned is None:
            continue
        for host, ids in index.blocks[kid].items():
            domain = key(host, ids)
            if not domain or host in banned:
                continue
            n = len(ids)
            if domain in totals:
                totals[domain] += n
                lists[domain].append((host, kid, n))
            else:
                totals[domain] = n
                lists[domain] = [(host, kid, n)]
    return {domain: (total, lists[domain]) for domain, total in totals.items()}


def _domain_fit(domains: _Domains, gpus: int, sliced: int, same_host: bool,
                index: FreeIndex | None) -> Placement | None:
    """Best fit over domains: the one whose free GPUs hold `gpus` with the fewest left over
    (ties: the name), then within it one host if one holds them, else the largest blocks first,
    the last one best-fit. With `index`, the tallies are upper bounds (earlier in the pass): a
    domain is brought up to date before it is used (so the fit is best by the tallies known)."""
    fitting = [(total - gpus, name) for name, (total, _) in domains.items() if total >= gpus]
    for _, name in sorted(fitting):
        blocks = domains[name][1]
        if index is not None:
            blocks = [(h, k, n) for h, k, _ in blocks if (n := len(index.blocks[k].get(h, ())))]
            domains[name] = (sum(b[2] for b in blocks), blocks)
            if domains[name][0] < gpus:
                continue
        blocks = sorted(blocks, key=lambda b: (-b[2], b[0]))
        single = [b for b in blocks if b[2] >= gpus]
        if single:
            host, kid, have = single[-1]  # the smallest that holds them
            return Placement(((host, kid, gpus),), (sliced, 1, have - gpus))
        if same_host:
            continue
        chosen, got = [], 0
        for host, kid, have in blocks:
            take = min(have, gpus - got)
            chosen.append((host, kid, take))
            got += take
            if got == gpus:
                return Placement(tuple(chosen), (sliced, len({h for h, _, _ in chosen}), have - take))
    return None


def _island_fit(index: FreeIndex, groups: Sequence[Group], gpus: int, exclude: Exclusions | None,
                largest: Callable[[int, str, list[int]], int]) -> Placement | None:
    """A host one of whose NVLink islands holds `gpus` free GPUs of a group: the one with the
    fewest left in that island (then on the host). Single-kind blocks only (a host mixing kinds
    of one group is rare; it is skipped)."""
    best: _IslandFit | None = None
    for group in groups:
        for kid in group.kinds:
            banned = exclude.get(kid, _NO_HOSTS) if exclude else _NO_HOSTS
            if banned is not None:
                best = _island_fit_of_kind(index, kid, gpus, banned, largest, best, int(group.time_sliced))
    if best is None:
        return None
    return Placement(((best[2], best[3], gpus),), (best[4], 1, best[1]))


# (GPUs left in the island, GPUs left on the host, host, kind id, time-sliced)
_IslandFit = tuple[int, int, str, int, int]


def _island_fit_of_kind(index: FreeIndex, kid: int, gpus: int, banned: frozenset[str],
                        largest: Callable[[int, str, list[int]], int], best: _IslandFit | None,
                        sliced: int) -> _IslandFit | None:
    buckets = index.buckets[kid]
    for count in range(gpus, len(buckets)):
        if best is not None and best[0] == 0 and count - gpus > best[1]:
            break  # an exact island on a smaller host was found: none here beats it
        for host in buckets[count]:
            island = largest(kid, host, index.blocks[kid][host]) if host not in banned else 0
            if island >= gpus and (best is None or (island - gpus, count - gpus) < best[:2]):
                best = (island - gpus, count - gpus, host, kid, sliced)
    return best


def refused_for_topology(index: FreeIndex, req: RequestView, groups: Sequence[Group],
                         topology: TopologyView | None) -> bool:
    """Whether `req` waits only because of its `required` topology: the blind placement would
    fit it now."""
    if topology is None or not req.within or not req.within_required:
        return False
    return index.find(groups, req.gpus, req.same_host) is not None
