"""What a capacity move would do, shown before anything is written (read-only).

`capacity_preview` answers:
- per pool, capacity before and after, and whether the pool's guarantees still fit in it;
- per team and pool, the GPUs it occupies before and after, against its quota;
- per lease, what happens to it: preempted by a drain of its host, left running over its team's
  limit in the pool its GPUs now belong to, preempted or granted by the next scheduling pass (the
  real policy is run on the snapshot the engine would build after the move), or just running on.

The move itself is `allocation.services.capacity.capacity_move`, which recomputes this preview
under the pools' scheduling locks.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q, Sum
from django.utils import timezone

from allocation.engine.snapshot import build_snapshot
from allocation.models import Lease, LeaseGpu, Quota
from allocation.policy import get_policy
from allocation.policy.types import Decisions, Snapshot
from core.errors import DomainError
from inventory.models import Gpu, Host, Pool
from inventory.selectors import capacity_units, pool_list

MODES = {"keep": "cordon", "drain": "drain"}  # preview mode -> host action taken before the move
HELD_ALONE = ("block", "follow_lease")  # what a held GPU picked without its host does to the move
OUTCOMES = {
    "preempted": "preempted by the drain",
    "preempted_next_pass": "preempted at the next pass",
    "over_limit": "left over its limit",
    "keeps_running": "keeps running",
    "granted_next_pass": "could start",
}


@dataclass(frozen=True)
class PoolChange:
    pool: str
    capacity_before: int
    capacity_after: int
    guaranteed_total: int

    @property
    def delta(self) -> int:
        return self.capacity_after - self.capacity_before

    @property
    def shortfall(self) -> int:
        """GPUs by which the pool's guarantees exceed its capacity after the move (0: they fit)."""
        return max(0, self.guaranteed_total - self.capacity_after)


@dataclass(frozen=True)
class QuotaChange:
    """GPUs of `pool` a team occupies (counted where the GPUs are, not by the lease's pool)."""

    team: str
    pool: str
    guaranteed: int
    limit: int | None
    held_before: int
    held_after: int

    @property
    def over_limit_by(self) -> int:
        return max(0, self.held_after - self.limit) if self.limit is not None else 0


@dataclass(frozen=True)
class LeaseImpact:
    lease_id: str
    team: str
    pool: str
    state: str
    gpu_count: int
    gpus_moved: int
    outcome: str  # a key of OUTCOMES
    detail: str

    @property
    def label(self) -> str:
        return OUTCOMES[self.outcome]


class ImpactSummary:
    """What a preview of a capacity change says of its pools and leases, whatever the change (a
    move here, a bulk host action in host_bulk_preview.py): the dataclasses below supply them."""

    pools: tuple[PoolChange, ...]
    leases: tuple[LeaseImpact, ...]

    @property
    def guarantees_ok(self) -> bool:
        """Every affected pool's guarantees still fit in its capacity after the change."""
        return not any(p.shortfall for p in self.pools)

    @property
    def preempted(self) -> tuple[LeaseImpact, ...]:
        """Leases the change preempts: by the drain of their host, or at the next pass."""
        return tuple(i for i in self.leases if i.outcome in ("preempted", "preempted_next_pass"))

    @property
    def could_start(self) -> tuple[LeaseImpact, ...]:
        """Waiting leases the next pass could grant only because of the change."""
        return tuple(i for i in self.leases if i.outcome == "granted_next_pass")


@dataclass(frozen=True)
class CapacityPreview(ImpactSummary):
    target: str
    mode: str
    gpu_ids: tuple[int, ...]  # top-level GPUs to move (their MIG slices follow)
    fence_host_ids: tuple[int, ...]  # whole hosts holding leases: cordoned or drained first
    units: int  # capacity units moved (a GPU, or each slice of a MIG GPU)
    pools: tuple[PoolChange, ...]
    quotas: tuple[QuotaChange, ...]
    leases: tuple[LeaseImpact, ...]
    blocked: tuple[str, ...]
    notes: tuple[str, ...]
    fingerprint: str

    @property
    def can_confirm(self) -> bool:
        return bool(self.gpu_ids) and not self.blocked



def _selected_gpus(gpu_ids: Sequence[int], host_ids: Sequence[int]) -> list[Gpu]:
    """Top-level, present GPUs picked one by one or through their whole host."""
    return list(Gpu.objects.filter(Q(pk__in=list(gpu_ids)) | Q(host_id__in=list(host_ids)),
                                   parent__isnull=True, gone=False)
                .select_related("host", "pool").order_by("host__name", "index"))


def _units(gpus: Sequence[Gpu]) -> dict[int, int]:
    """Capacity units per top-level GPU, by the one definition of capacity (`capacity_units`): a
    GPU counts once, a MIG GPU by its present slices."""
    ids = [g.pk for g in gpus]
    units: Counter[int] = Counter()
    for pk, parent_id in capacity_units().filter(Q(pk__in=ids) | Q(parent_id__in=ids)).values_list("pk", "parent_id"):
        units[parent_id or pk] += 1
    return {g.pk: units[g.pk] for g in gpus}


def _next_pass(snapshot: Snapshot) -> Decisions:
    return get_policy(settings.GPUPOOL["POLICY"])(snapshot)


def _fingerprint(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Selection:
    """The GPUs a move would take: top-level ones leaving their pool, with their slices."""

    moving: list[Gpu]
    already: list[Gpu]  # picked, but already in the target pool
    units: dict[int, int]  # capacity units per moving GPU
    all_ids: set[int]  # moving GPUs and their MIG slices

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(sorted(g.pk for g in self.moving))


@dataclass(frozen=True)
class _Holdings:
    """The leases holding moving GPUs: how many each, the whole hosts to fence off, and held GPUs
    picked without their host ((lease id, host name) -> count)."""

    held: list[tuple[Any, ...]]  # (lease_id, gpu_id, host_id, host name, pool_id) per held GPU
    by_lease: Counter[str]
    fence: set[int]
    loose: list[tuple[tuple[str, str], int]]


def capacity_preview(*, pool: Pool, gpu_ids: Sequence[int] = (), host_ids: Sequence[int] = (),
                     mode: str = "keep", held_alone: str = "block", next_pass: bool = True) -> CapacityPreview:
    """What moving the given GPUs and whole hosts to `pool` would do; writes nothing.

    GPUs already in `pool`, MIG slices (they follow their GPU) and vanished GPUs are left out.
    An empty selection gives an empty preview that cannot be confirmed. `next_pass=False` leaves
    out what the next scheduling pass would do (it runs the policy twice per affected pool), for
    a move that nobody reviewed first."""
    _check_options(mode, held_alone)
    now = timezone.now()
    sel = _select(pool, gpu_ids, host_ids)
    holds = _holdings(sel, set(Host.objects.filter(pk__in=list(host_ids)).values_list("pk", flat=True)))
    blocked = [f"{n} picked GPU(s) on {host_name} are held by lease {lid[:8]}: select the whole host {host_name} "
               "(to cordon or drain it), or wait until the lease ends"
               for (lid, host_name), n in holds.loose] if held_alone == "block" else []
    leases = {str(x.pk): x for x in Lease.objects.filter(pk__in=list(holds.by_lease))
              .select_related("team", "pool", "priority_class", "host")}
    affected = list(Pool.objects.filter(pk__in={g.pool_id for g in sel.moving} | {pool.pk}).order_by("name"))
    pools = _pool_changes(affected, pool, sel)

    drained = {lid for lid, lease in leases.items() if mode == "drain" and lease.host_id in holds.fence}
    quotas = _quota_changes(affected, pool, holds.held, leases, drained)
    over = {(q.team, q.pool): q for q in quotas if q.over_limit_by}
    impacts = [_lease_impact(lease, holds.by_lease[lid], pool, over, lid in drained)
               for lid, lease in sorted(leases.items(), key=lambda kv: (kv[1].team.name, kv[0]))]
    if next_pass and sel.moving and not blocked:
        impacts += _next_pass_impacts(affected, pool, sel.all_ids, holds.fence, drained, now, exclude=set(leases))

    return CapacityPreview(
        target=pool.name, mode=mode, gpu_ids=sel.ids, fence_host_ids=tuple(sorted(holds.fence)),
        units=sum(sel.units.values()), pools=pools, quotas=quotas, leases=tuple(impacts),
        blocked=tuple(blocked), notes=tuple(_notes(pool, mode, held_alone, sel, holds)),
        # What the admin decides on: unrelated grants elsewhere in the pools do not make it stale.
        fingerprint=_fingerprint(pool.name, mode, sel.ids, sorted(holds.fence), blocked,
                                 [(p.pool, p.capacity_before, p.capacity_after) for p in pools],
                                 sorted((i.lease_id, i.outcome) for i in impacts)))


def _check_options(mode: str, held_alone: str) -> None:
    if mode not in MODES:
        raise DomainError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}", code="invalid_mode")
    if held_alone not in HELD_ALONE:
        raise DomainError(f"unknown held_alone {held_alone!r}; use one of {', '.join(HELD_ALONE)}",
                          code="invalid_mode")


def _select(pool: Pool, gpu_ids: Sequence[int], host_ids: Sequence[int]) -> _Selection:
    picked = _selected_gpus(gpu_ids, host_ids)
    moving = [g for g in picked if g.pool_id != pool.pk]
    ids = {g.pk for g in moving}
    slices = set(Gpu.objects.filter(parent_id__in=ids).values_list("pk", flat=True))
    return _Selection(moving=moving, already=[g for g in picked if g.pool_id == pool.pk],
                      units=_units(moving), all_ids=ids | slices)


def _holdings(sel: _Selection, whole_hosts: set[int]) -> _Holdings:
    """Leases holding any moving GPU (or slice of one). A held GPU on a host picked whole fences
    that host; one picked alone is loose."""
    held = list(LeaseGpu.objects.filter(active=True, gpu_id__in=sel.all_ids).values_list(
        "lease_id", "gpu_id", "gpu__host_id", "gpu__host__name", "gpu__pool_id"))
    by_lease: Counter[str] = Counter()
    loose: Counter[tuple[str, str]] = Counter()
    fence: set[int] = set()
    for lease_id, _, host_id, host_name, _ in held:
        by_lease[str(lease_id)] += 1
        if host_id in whole_hosts:
            fence.add(host_id)
        else:
            loose[(str(lease_id), host_name)] += 1
    return _Holdings(held=held, by_lease=by_lease, fence=fence, loose=sorted(loose.items()))


def _pool_changes(affected: Sequence[Pool], target: Pool, sel: _Selection) -> tuple[PoolChange, ...]:
    """Capacity of each affected pool before and after, against the guarantees given in it."""
    capacity = {p.pk: p.capacity for p in pool_list().filter(pk__in=[a.pk for a in affected])}
    out_units: Counter[int] = Counter()
    for g in sel.moving:
        out_units[g.pool_id] += sel.units[g.pk]
    guaranteed = dict(Quota.objects.filter(pool__in=affected).values_list("pool_id").annotate(s=Sum("guaranteed")))
    arriving = sum(out_units.values())
    return tuple(PoolChange(
        pool=p.name, capacity_before=capacity.get(p.pk, 0),
        capacity_after=capacity.get(p.pk, 0) - out_units[p.pk] + (arriving if p.pk == target.pk else 0),
        guaranteed_total=guaranteed.get(p.pk) or 0) for p in affected)


def _notes(pool: Pool, mode: str, held_alone: str, sel: _Selection, holds: _Holdings) -> list[str]:
    notes = [f"{n} picked GPU(s) on {host_name} are held by lease {lid[:8]}: it keeps them until it ends, and "
             f"pool {pool.name} cannot grant them before" for (lid, host_name), n in holds.loose
             ] if held_alone == "follow_lease" else []
    if sel.already:
        notes.append(f"{len(sel.already)} selected GPU(s) are already in pool {pool.name} and are left out.")
    if holds.fence:
        names = ", ".join(sorted(h.name for h in Host.objects.filter(pk__in=holds.fence)))
        verb = "drained (their leases are preempted with notice)" if mode == "drain" else "cordoned"
        notes.append(f"Hosts holding leases are {verb} before the move: {names}. Uncordon them on the "
                     "Fleet page once their leases have ended.")
    if any(units != 1 for units in sel.units.values()):
        notes.append("MIG GPUs move with all their slices; each slice counts as one GPU of capacity.")
    return notes


def _quota_changes(affected: Sequence[Pool], target: Pool, held: Sequence[tuple[Any, ...]], leases: dict[str, Lease],
                   drained: set[str]) -> tuple[QuotaChange, ...]:
    """Occupancy per team in each affected pool, before and after, with its quota. Leases a drain
    preempts are not counted after the move (they only sit out their grace period)."""
    names = {p.pk: p.name for p in affected}
    before: Counter[tuple[str, str]] = Counter()
    for team, pool_id in LeaseGpu.objects.filter(active=True, gpu__pool__in=affected).values_list(
            "lease__team__name", "gpu__pool_id"):
        before[(team, names[pool_id])] += 1
    after = Counter(before)
    for team, pool_id in LeaseGpu.objects.filter(active=True, lease_id__in=list(drained),
                                                 gpu__pool__in=affected).values_list("lease__team__name",
                                                                                     "gpu__pool_id"):
        after[(team, names[pool_id])] -= 1
    for lease_id, _, _, _, pool_id in held:
        team = leases[str(lease_id)].team.name
        if str(lease_id) not in drained:
            after[(team, names[pool_id])] -= 1
            after[(team, target.name)] += 1
    rows = {(q.team.name, q.pool.name): q
            for q in Quota.objects.filter(pool__in=affected).select_related("team", "pool")}
    keys = sorted(k for k in {*rows, *before, *after} if k in rows or before[k] or after[k])
    return tuple(QuotaChange(
        team=team, pool=pool_name,
        guaranteed=rows[(team, pool_name)].guaranteed if (team, pool_name) in rows else 0,
        limit=rows[(team, pool_name)].limit if (team, pool_name) in rows else None,
        held_before=before[(team, pool_name)], held_after=max(0, after[(team, pool_name)]))
        for team, pool_name in keys)


def _lease_impact(lease: Lease, moved: int, target: Pool, over: dict[tuple[str, str], QuotaChange],
                  drained: bool) -> LeaseImpact:
    base: dict[str, Any] = {"lease_id": str(lease.pk), "team": lease.team.name, "pool": lease.pool.name,
            "state": lease.state, "gpu_count": lease.gpu_count, "gpus_moved": moved}
    host = lease.host.name if lease.host else "its host"
    if drained:
        return LeaseImpact(**base, outcome="preempted",
                           detail=f"{host} is drained: preempted with notice; its GPUs are freed after the "
                                  f"{lease.priority_class.grace_s} s grace or once its workload stops")
    quota = over.get((lease.team.name, target.name))
    if quota is not None:
        limit_text = f"may hold {quota.limit}"
        return LeaseImpact(**base, outcome="over_limit",
                           detail=f"keeps running on {moved} GPU(s) now in pool {target.name}, where team "
                                  f"{lease.team.name} {limit_text} and would occupy {quota.held_after} "
                                  f"(over by {quota.over_limit_by})")
    return LeaseImpact(**base, outcome="keeps_running",
                       detail=f"keeps running on {moved} GPU(s) now in pool {target.name} until it ends; "
                              f"{host} stays cordoned")


def _next_pass_impacts(affected: Sequence[Pool], target: Pool, moving: set[int], fence: set[int],
                       drained: set[str], now: datetime, *, exclude: set[str]) -> list[LeaseImpact]:
    """Run the real policy on each affected pool as it is and as it would be after the move;
    report preemptions and grants that only the move causes."""
    snaps = {p.pk: build_snapshot(p, now) for p in affected}
    moved_views = []
    for pool_id, (snap, _, gpu_host) in snaps.items():
        if pool_id == target.pk:
            continue
        moved_views += [replace(g, pool=target.name, schedulable=g.schedulable and gpu_host[g.id] not in fence)
                        for g in snap.gpus if g.id in moving]
    new_pre: dict[str, str] = {}
    new_grant: set[str] = set()
    for pool_id, (snap, _, _) in snaps.items():
        if pool_id == target.pk:
            after = replace(snap, gpus=snap.gpus + tuple(moved_views))
        else:
            after = replace(snap, gpus=tuple(g for g in snap.gpus if g.id not in moving),
                            running=tuple(replace(r, ending=True) if r.lease_id in drained else r
                                          for r in snap.running))
        before_d, after_d = _next_pass(snap), _next_pass(after)
        old_pre = {p.lease_id for p in before_d.preemptions}
        new_pre.update({p.lease_id: p.reason for p in after_d.preemptions if p.lease_id not in old_pre})
        new_grant |= {g.lease_id for g in after_d.grants} - {g.lease_id for g in before_d.grants}
    rows = {str(x.pk): x for x in Lease.objects.filter(pk__in=[*new_pre, *new_grant]).select_related("team", "pool")}
    impacts = []
    for lid in sorted(new_pre):
        if lid in exclude or lid not in rows:
            continue
        lease = rows[lid]
        impacts.append(LeaseImpact(lease_id=lid, team=lease.team.name, pool=lease.pool.name, state=lease.state,
                                   gpu_count=lease.gpu_count, gpus_moved=0, outcome="preempted_next_pass",
                                   detail=f"the next scheduling pass would preempt it: {new_pre[lid]}"))
    for lid in sorted(new_grant - set(new_pre)):
        if lid in rows:
            lease = rows[lid]
            impacts.append(LeaseImpact(lease_id=lid, team=lease.team.name, pool=lease.pool.name,
                                       state=lease.state, gpu_count=lease.gpu_count, gpus_moved=0,
                                       outcome="granted_next_pass",
                                       detail="pending now; the next scheduling pass could grant it"))
    return impacts


def lease_outcome_counts(preview: CapacityPreview) -> list[tuple[str, str, int]]:
    """(outcome, label, number of leases) for each outcome present, most severe first."""
    counts = Counter(i.outcome for i in preview.leases)
    return [(key, label, counts[key]) for key, label in OUTCOMES.items() if counts[key]]
