"""Best-fit placement over an index of the free GPUs of one pool during one pass.

Vocabulary (see matching.py for kinds and layouts):
- *group*: the eligible kinds of one model and one sharing mode; a lease takes GPUs from one
  group only ("all GPUs of one lease are of one model"; time-sliced replicas never mixed with
  exclusive GPUs).
- *block*: the free GPUs of one kind on one host. Hosts are bucketed by block size so that the
  best fit (smallest sufficient block) is found in O(GPUs per host), not O(hosts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from allocation.policy.freebase import FreeBase
from allocation.policy.matching import (
    Constraint,
    GroupKey,
    Kind,
    PoolLayout,
    constraint_of,
    kind_eligible,
)
from allocation.policy.topology import pick_ids
from allocation.policy.types import RequestView

# Per kind id: None excludes the whole kind, a set excludes those hosts (backfill reservations).
Exclusions = Mapping[int, frozenset[str] | None]
_NO_HOSTS: frozenset[str] = frozenset()
# A same-host fit: (GPUs left stranded, host, blocks as in Placement.blocks).
_Fit = tuple[int, str, tuple[tuple[str, int, int], ...]]


@dataclass(frozen=True)
class Group:
    """Eligible kinds of one model/sharing mode, with the capacity bounds of that group."""

    key: GroupKey
    kinds: tuple[int, ...]
    label: str
    time_sliced: bool
    capacity_total: int  # every schedulable GPU of the group in the pool, free or held
    capacity_block: int  # the largest number on one host
    team: str = ""  # the team whose reserved time-sliced replicas it includes ("" none)


@dataclass(frozen=True)
class Placement:
    blocks: tuple[tuple[str, int, int], ...]  # (host, kind id, count)
    score: tuple[int, int, int]  # (time-sliced, hosts used, GPUs left stranded); lower is better

    @property
    def host(self) -> str:
        """The host holding most of the lease (the only one for same-host placements)."""
        counts: dict[str, int] = {}
        for host, _, count in self.blocks:
            counts[host] = counts.get(host, 0) + count
        return max(counts, key=lambda h: (counts[h], -list(counts).index(h)))


class FreeIndex:
    """Free GPUs of one pool during one pass. Only shrinks (grants, holds), so a shape that does
    not fit once in a pass never fits later in it (callers cache failures on that basis).
    `islands` (GPU id -> NVLink island, topology.py): `take` keeps a host's lease in one."""
    islands: Mapping[int, str] = {}

    def __init__(self, layout: PoolLayout, kinds: list[Kind], base: FreeBase) -> None:
        """From the pool's free GPUs before the pass (`base`, which is copied, never changed:
        the per-host lists are shared, and this index only ever replaces them)."""
        self.layout = layout
        self.kinds = kinds  # shared per pass; grows when time-sliced GPUs are re-keyed to a team
        # A copy of the (memoised, shared) capacity map, so re-keyed kinds can be added per pass.
        self.capacity: dict[int, dict[str, tuple[int, ...]]] = dict(layout.capacity)
        self.blocks = {kid: dict(blocks) for kid, blocks in base.blocks.items()}
        self.buckets = {kid: [dict(b) for b in buckets] for kid, buckets in base.buckets.items()}
        self.free_total = dict(base.free_total)
        self.version = 0  # bumped on every change, so callers can cache answers per state
        self._groups: dict[tuple[Constraint, str], tuple[Group, ...]] = {}
        self.has_shared = any(kinds[k].shared_team is not None or kinds[k].time_sliced
                              for k in layout.capacity)
        if layout.mixed is None:
            layout.mixed = self._mixed_hosts()
        self._mixed = layout.mixed
        # (group key, team) -> hosts mixed for that team only: replicas reserved for it beside others.
        self._team_mixed: dict[tuple[GroupKey, str], dict[str, None]] = {}

    def _mixed_hosts(self) -> dict[GroupKey, tuple[str, ...]]:
        """Hosts holding more than one kind of the same group (rare: mixed memory or driver)."""
        seen: dict[GroupKey, dict[str, int]] = {}
        for kid, hosts in self.capacity.items():
            per_host = seen.setdefault(self.kinds[kid].group_key, {})
            for host in hosts:
                per_host[host] = per_host.get(host, 0) + 1
        return {key: tuple(h for h, n in hosts.items() if n > 1) for key, hosts in seen.items()}

    # --- eligibility ----------------------------------------------------------------------------

    def groups_for(self, req: RequestView) -> tuple[Group, ...]:
        """Eligible groups for a request, exclusive GPUs before time-sliced ones (cached)."""
        constraint = constraint_of(req)
        if not self.has_shared:
            hit = self.layout.groups.get(constraint)
            if hit is None:
                hit = self.layout.groups[constraint] = self._eligible(constraint, req.team)
            return hit
        cache_key = (constraint, req.team)
        hit = self._groups.get(cache_key)
        if hit is None:
            hit = self._groups[cache_key] = self._eligible(constraint, req.team)
        return hit

    def _eligible(self, constraint: Constraint, team: str) -> tuple[Group, ...]:
        by_key: dict[GroupKey, list[int]] = {}
        for kid in self.capacity:
            if kind_eligible(self.kinds[kid], constraint, team):
                by_key.setdefault(self.kinds[kid].group_key, []).append(kid)
        groups = [self._group(key, tuple(kids), team) for key, kids in by_key.items()]
        groups.sort(key=lambda g: g.time_sliced)
        return tuple(groups)

    def _group(self, key: GroupKey, kids: tuple[int, ...], team: str) -> Group:
        cap = self.capacity
        per_host: dict[str, int] = {}
        for kid in kids:
            for host, ids in cap[kid].items():
                per_host[host] = per_host.get(host, 0) + len(ids)
        reserved = team if any(self.kinds[k].shared_team for k in kids) else ""
        return Group(key, kids, self.kinds[kids[0]].label, key[2], sum(per_host.values()),
                     max(per_host.values(), default=0), reserved)

    def _mixed_of(self, group: Group) -> Sequence[str]:
        """Hosts holding more than one kind of the group (`_mixed_hosts`, `move`)."""
        hosts = self._mixed.get(group.key, ())
        reserved = self._team_mixed.get((group.key, group.team)) if group.team else None
        return (*hosts, *reserved) if reserved else hosts

    # --- queries --------------------------------------------------------------------------------

    def free_in(self, group: Group, exclude: Exclusions | None = None) -> int:
        total = 0
        for kid in group.kinds:
            if exclude and kid in exclude:
                hosts = exclude[kid]
                if hosts is None:
                    continue
                blocks = self.blocks[kid]
                total += self.free_total[kid] - sum(len(blocks.get(h, ())) for h in hosts)
            else:
                total += self.free_total[kid]
        return total

    def free_on(self, host: str, group: Group) -> int:
        if len(group.kinds) == 1:
            return len(self.blocks[group.kinds[0]].get(host, ()))
        return sum(len(self.blocks[kid].get(host, ())) for kid in group.kinds)

    def largest_block(self, group: Group) -> tuple[int, str]:
        """(size, host) of the largest free block of the group; (0, "") when none is free."""
        best = (0, "")
        for kid in group.kinds:
            buckets = self.buckets[kid]
            for count in range(len(buckets) - 1, best[0], -1):
                if buckets[count]:
                    best = (count, next(iter(buckets[count])))
                    break
        for host in self._mixed_of(group):
            size = self.free_on(host, group)
            if size > best[0]:
                best = (size, host)
        return best

    def find(self, groups: Sequence[Group], gpus: int, same_host: bool,
             exclude: Exclusions | None = None) -> Placement | None:
        """The best placement of `gpus` GPUs over the groups, or None. Same host: the smallest
        sufficient block (fewest GPUs stranded). Otherwise one host if any fits, else the fewest
        hosts (largest blocks first, the last one best-fit). Exclusive GPUs beat time-sliced."""
        best: Placement | None = None
        for group in groups:
            search = self._best_host if same_host else self._spread
            found = search(group, gpus, exclude)
            if found is not None and (best is None or found.score < best.score):
                best = found
        return best

    def _best_host(self, group: Group, gpus: int, exclude: Exclusions | None) -> Placement | None:
        best = self._best_block(group, gpus, exclude)
        mixed = self._mixed_of(group)
        if mixed:
            best = self._best_mixed_host(group, gpus, exclude, mixed, best)
        if best is None:
            return None
        return Placement(best[2], (int(group.time_sliced), 1, best[0]))

    def _best_block(self, group: Group, gpus: int, exclude: Exclusions | None) -> _Fit | None:
        """The smallest free block of one kind holding `gpus`: from the buckets, no host scan."""
        best: _Fit | None = None
        for kid in group.kinds:
            banned = exclude.get(kid, _NO_HOSTS) if exclude else _NO_HOSTS
            if banned is None:
                continue
            buckets = self.buckets[kid]
            for count in range(gpus, len(buckets)):
                if best is not None and count - gpus >= best[0]:
                    break
                host = _first_not_in(buckets[count], banned)
                if host is not None:
                    best = (count - gpus, host, ((host, kid, gpus),))
                    break
        return best

    def _best_mixed_host(self, group: Group, gpus: int, exclude: Exclusions | None,
                         hosts: Sequence[str], best: _Fit | None) -> _Fit | None:
        """`best`, or a host holding several kinds of the group whose free GPUs together fit
        with fewer stranded."""
        for host in hosts:
            blocks = []
            size = 0
            for kid in group.kinds:
                banned = exclude.get(kid, _NO_HOSTS) if exclude else _NO_HOSTS
                have = len(self.blocks[kid].get(host, ()))
                if have and banned is not None and host not in banned:
                    blocks.append((host, kid, have))
                    size += have
            if size >= gpus and (best is None or size - gpus < best[0]):
                best = (size - gpus, host, trim(blocks, gpus))
        return best

    def _spread(self, group: Group, gpus: int, exclude: Exclusions | None) -> Placement | None:
        if self.free_in(group, exclude) < gpus:
            return None
        single = self._best_host(group, gpus, exclude)
        if single is not None:
            return single
        chosen = self._largest_blocks(group, gpus, exclude)
        # The last block only needs the remainder: use the smallest block that holds it.
        rest = gpus - sum(count for _, _, count in chosen[:-1])
        used = {(h, k) for h, k, _ in chosen[:-1]}
        last = self._smallest_block(group, exclude, rest, chosen[-1], used)
        chosen[-1] = (last[0], last[1], rest)
        hosts = len({h for h, _, _ in chosen})
        return Placement(tuple(chosen), (int(group.time_sliced), hosts, last[2] - rest))

    def _largest_blocks(self, group: Group, gpus: int,
                        exclude: Exclusions | None) -> list[tuple[str, int, int]]:
        """Whole free blocks, largest first, until they hold `gpus` (the fewest hosts); the
        caller made sure that enough are free."""
        chosen: list[tuple[str, int, int]] = []
        got = 0
        top = max((len(self.buckets[k]) for k in group.kinds), default=0)
        for count in range(top - 1, 0, -1):
            for kid in group.kinds:
                banned = exclude.get(kid, _NO_HOSTS) if exclude else _NO_HOSTS
                if banned is None or count >= len(self.buckets[kid]):
                    continue
                for host in self.buckets[kid][count]:
                    if host in banned:
                        continue
                    chosen.append((host, kid, count))
                    got += count
                    if got >= gpus:
                        return chosen
        return chosen

    def _smallest_block(self, group: Group, exclude: Exclusions | None, rest: int,
                        last: tuple[str, int, int],
                        used: set[tuple[str, int]]) -> tuple[str, int, int]:
        """The smallest free block holding `rest` GPUs, not one already used: `last` unless a
        smaller one does."""
        for count in range(rest, last[2]):
            for kid in group.kinds:
                banned = exclude.get(kid, _NO_HOSTS) if exclude else _NO_HOSTS
                if banned is None or count >= len(self.buckets[kid]):
                    continue
                swap = next((h for h in self.buckets[kid][count]
                             if h not in banned and (h, kid) not in used), None)
                if swap is not None:
                    return (swap, kid, count)
        return last

    # --- updates --------------------------------------------------------------------------------

    def take(self, placement: Placement) -> list[int]:
        """Remove the placement's GPUs from the index (lowest ids of each block, or per `islands`)."""
        taken: list[int] = []
        for host, kid, count in placement.blocks:
            free = self.blocks[kid][host]
            ids = pick_ids(free, count, self.islands) if self.islands else free[:count]
            self._set_block(kid, host, [i for i in free if i not in ids] if self.islands else free[count:])
            taken.extend(ids)
        return taken

    def _set_block(self, kid: int, host: str, ids: list[int]) -> None:
        blocks, buckets = self.blocks[kid], self.buckets[kid]
        self.version += 1
        old = blocks.get(host)
        if old:
            del buckets[len(old)][host]
            self.free_total[kid] -= len(old)
        if ids:
            while len(buckets) <= len(ids):
                buckets.append({})
            blocks[host] = ids
            buckets[len(ids)][host] = None
            self.free_total[kid] += len(ids)
        else:
            blocks.pop(host, None)

    def kind_id(self, kind: Kind) -> int:
        """The id of `kind` in this pass, added without GPUs when new (timeslice.py)."""
        try:
            kid = self.kinds.index(kind)  # a handful of kinds; the list is shared by the pass
        except ValueError:
            kid = len(self.kinds)
            self.kinds.append(kind)
        if kid not in self.blocks:  # no capacity of its own: the kind it comes from counts all
            self.blocks[kid], self.buckets[kid], self.free_total[kid] = {}, [{}], 0
            self.capacity[kid] = {}
            self.has_shared = True
            self._groups.clear()
        return kid

    def move(self, host: str, kid: int, ids: Sequence[int], new: int) -> None:
        """Move those of `ids` that are free on `host` from kind `kid` to kind `new` (same group,
        reserved for a team: time-sliced replicas). Ids not free there are left alone."""
        free, wanted = self.blocks[kid].get(host, []), set(ids)
        moved = [i for i in free if i in wanted]
        if not moved:
            return
        self._set_block(kid, host, [i for i in free if i not in wanted])
        self._set_block(new, host, sorted((*self.blocks[new].get(host, ()), *moved)))
        team = self.kinds[new].shared_team
        if team and self.blocks[kid].get(host):  # both kinds free here: mixed for that team
            self._team_mixed.setdefault((self.kinds[kid].group_key, team), {})[host] = None


def capacity_bound(groups: Sequence[Group], same_host: bool) -> int:
    """The most GPUs the groups could ever give one lease (on one host when `same_host`); 0 for
    no groups. A plain loop: it runs for every pending request of a pass."""
    bound = 0
    for group in groups:
        size = group.capacity_block if same_host else group.capacity_total
        if size > bound:
            bound = size
    return bound


def _first_not_in(hosts: dict[str, None], banned: frozenset[str]) -> str | None:
    return next((h for h in hosts if h not in banned), None) if banned else next(iter(hosts), None)


def trim(blocks: list[tuple[str, int, int]], gpus: int) -> tuple[tuple[str, int, int], ...]:
    out = []
    for host, kid, have in blocks:
        if gpus <= 0:
            break
        out.append((host, kid, min(have, gpus)))
        gpus -= min(have, gpus)
    return tuple(out)
