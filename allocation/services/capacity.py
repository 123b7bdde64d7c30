"""Capacity moves with a preview: what moving GPUs (or whole hosts) to another pool would do,
shown before anything is written.

`capacity_preview` answers, read-only:
- per pool, capacity before and after, and whether the pool's guarantees still fit in it;
- per team and pool, the GPUs it occupies before and after, against its quota;
- per lease, what happens to it: preempted by a drain of its host, left running over its team's
  limit in the pool its GPUs now belong to, preempted or granted by the next scheduling pass (the
  real policy is run on the snapshot the engine would build after the move), or just running on.

Leases on moved GPUs keep running (a move never ends them). Their hosts are cordoned first (mode
"keep") or drained (mode "drain": the leases are preempted with notice). A held GPU picked alone,
without its whole host, cannot be fenced off that way (there is no per-GPU cordon): the dashboard's
preview blocks the move and says how to proceed (`held_alone="block"`), while the API's one-GPU move
lets the lease keep it until it ends (`held_alone="follow_lease"`; the engine never grants a GPU
that a lease of another pool still holds).

`capacity_move` is the one write, for the API and the dashboard alike: it recomputes the preview
under the pools' scheduling locks and performs the move only if it is allowed and still matches
what the admin saw (its fingerprint, when one is given).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from allocation.engine import build_snapshot, lock_pool
from allocation.leases import audit
from allocation.models import Lease, LeaseGpu, Quota
from allocation.policy import get_policy
from allocation.policy.types import Decisions, Snapshot
from allocation.services.admin import host_admin_action
from allocation.triggers import request_pass
from core.errors import Conflict, DomainError
from inventory.choices import AdminState
from inventory.models import Gpu, Host, Pool
from inventory.selectors import capacity_units, pool_list
from inventory.services import gpus_move

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


@dataclass(frozen=True)
class CapacityPreview:
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


def capacity_preview(*, pool: Pool, gpu_ids: Sequence[int] = (), host_ids: Sequence[int] = (),
                     mode: str = "keep", held_alone: str = "block") -> CapacityPreview:
    """What moving the given GPUs and whole hosts to `pool` would do; writes nothing.

    GPUs already in `pool`, MIG slices (they follow their GPU) and vanished GPUs are left out.
    An empty selection gives an empty preview that cannot be confirmed."""
    if mode not in MODES:
        raise DomainError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}", code="invalid_mode")
    if held_alone not in HELD_ALONE:
        raise DomainError(f"unknown held_alone {held_alone!r}; use one of {', '.join(HELD_ALONE)}",
                          code="invalid_mode")
    now = timezone.now()
    whole = set(Host.objects.filter(pk__in=list(host_ids)).values_list("pk", flat=True))
    picked = _selected_gpus(gpu_ids, host_ids)
    already = [g for g in picked if g.pool_id == pool.pk]
    moving = [g for g in picked if g.pool_id != pool.pk]
    units = _units(moving)
    moving_ids = {g.pk for g in moving}
    all_moving = moving_ids | set(Gpu.objects.filter(parent_id__in=moving_ids).values_list("pk", flat=True))

    # Leases holding any moved GPU (or slice of one), and how many of their GPUs move.
    held = list(LeaseGpu.objects.filter(active=True, gpu_id__in=all_moving).values_list(
        "lease_id", "gpu_id", "gpu__host_id", "gpu__host__name", "gpu__pool_id"))
    moved_by_lease: Counter[str] = Counter()
    loose: Counter[tuple[str, str]] = Counter()  # (lease, host) -> held GPUs picked without their host
    fence: set[int] = set()
    for lease_id, _, host_id, host_name, _ in held:
        moved_by_lease[str(lease_id)] += 1
        if host_id in whole:
            fence.add(host_id)
        else:
            loose[(str(lease_id), host_name)] += 1
    loose_held = sorted(loose.items())
    blocked = [f"{n} picked GPU(s) on {host_name} are held by lease {lid[:8]}: select the whole host {host_name} "
               "(to cordon or drain it), or wait until the lease ends"
               for (lid, host_name), n in loose_held] if held_alone == "block" else []
    leases = {str(x.pk): x for x in Lease.objects.filter(pk__in=list(moved_by_lease))
              .select_related("team", "pool", "priority_class", "host")}

    source_ids = {g.pool_id for g in moving}
    affected = list(Pool.objects.filter(pk__in=source_ids | {pool.pk}).order_by("name"))
    capacity = {p.pk: p.capacity for p in pool_list().filter(pk__in=[a.pk for a in affected])}
    out_units: Counter[int] = Counter()
    for g in moving:
        out_units[g.pool_id] += units[g.pk]
    guaranteed = dict(Quota.objects.filter(pool__in=affected).values_list("pool_id").annotate(s=Sum("guaranteed")))
    pools = tuple(PoolChange(
        pool=p.name, capacity_before=capacity.get(p.pk, 0),
        capacity_after=capacity.get(p.pk, 0) - out_units[p.pk] + (sum(out_units.values()) if p.pk == pool.pk else 0),
        guaranteed_total=guaranteed.get(p.pk) or 0) for p in affected)

    drained = {lid for lid, lease in leases.items() if mode == "drain" and lease.host_id in fence}
    quotas = _quota_changes(affected, pool, held, leases, drained)
    over = {(q.team, q.pool): q for q in quotas if q.over_limit_by}
    impacts = [_lease_impact(lease, moved_by_lease[lid], pool, over, lid in drained)
               for lid, lease in sorted(leases.items(), key=lambda kv: (kv[1].team.name, kv[0]))]
    if moving and not blocked:
        impacts += _next_pass_impacts(affected, pool, all_moving, fence, drained, now, exclude=set(leases))

    notes = [f"{n} picked GPU(s) on {host_name} are held by lease {lid[:8]}: it keeps them until it ends, and "
             f"pool {pool.name} cannot grant them before" for (lid, host_name), n in loose_held
             ] if held_alone == "follow_lease" else []
    if already:
        notes.append(f"{len(already)} selected GPU(s) are already in pool {pool.name} and are left out.")
    if fence:
        names = ", ".join(sorted(h.name for h in Host.objects.filter(pk__in=fence)))
        verb = "drained (their leases are preempted with notice)" if mode == "drain" else "cordoned"
        notes.append(f"Hosts holding leases are {verb} before the move: {names}. Uncordon them on the "
                     "Fleet page once their leases have ended.")
    if any(units[g.pk] != 1 for g in moving):
        notes.append("MIG GPUs move with all their slices; each slice counts as one GPU of capacity.")

    gpu_tuple = tuple(sorted(moving_ids))
    return CapacityPreview(
        target=pool.name, mode=mode, gpu_ids=gpu_tuple, fence_host_ids=tuple(sorted(fence)),
        units=sum(units.values()), pools=pools, quotas=quotas, leases=tuple(impacts),
        blocked=tuple(blocked), notes=tuple(notes),
        # What the admin decides on: unrelated grants elsewhere in the pools do not make it stale.
        fingerprint=_fingerprint(pool.name, mode, gpu_tuple, sorted(fence), blocked,
                                 [(p.pool, p.capacity_before, p.capacity_after) for p in pools],
                                 sorted((i.lease_id, i.outcome) for i in impacts)))


def _quota_changes(affected: Sequence[Pool], target: Pool, held: Sequence[tuple], leases: dict[str, Lease],
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


@dataclass(frozen=True)
class CapacityMoveResult:
    moved: int
    fenced_hosts: tuple[str, ...]
    preview: CapacityPreview


def capacity_move(*, pool: Pool, actor: str, gpu_ids: Sequence[int] = (), host_ids: Sequence[int] = (),
                  mode: str = "keep", fingerprint: str = "", held_alone: str = "block") -> CapacityMoveResult:
    """Move GPUs and whole hosts to `pool` as previewed: cordon (or drain) the whole hosts that hold
    leases, then move the GPUs with their MIG slices; audited, and each affected pool gets a pass.

    The pools' scheduling locks are held from the check to the write, so no pass grants on these
    GPUs in between. Raises Conflict when the move is blocked, or when the fleet changed since the
    preview (`fingerprint`, when given, no longer matches); DomainError when nothing would move."""
    sources = set(Gpu.objects.filter(Q(pk__in=list(gpu_ids)) | Q(host_id__in=list(host_ids)))
                  .values_list("pool_id", flat=True))
    with transaction.atomic():
        for pool_id in sorted(sources | {pool.pk}):  # always in id order: two moves never deadlock
            lock_pool(pool_id)
        preview = capacity_preview(pool=pool, gpu_ids=gpu_ids, host_ids=host_ids, mode=mode, held_alone=held_alone)
        if preview.blocked:
            raise Conflict(preview.blocked[0], code="move_blocked")
        if not preview.gpu_ids:
            raise DomainError(f"nothing to move: no selected GPU is outside pool {pool.name}", code="nothing_to_move")
        if fingerprint and fingerprint != preview.fingerprint:
            raise Conflict("the fleet or its leases changed since the preview; review the new preview",
                           code="preview_stale")
        fenced = _fence_hosts(preview, actor)
        moved = _move_gpus(list(preview.gpu_ids), pool, actor)
    return CapacityMoveResult(moved=moved, fenced_hosts=tuple(fenced), preview=preview)


def _fence_hosts(preview: CapacityPreview, actor: str) -> list[str]:
    """Cordon (mode keep) or drain the whole hosts that hold leases; a draining host stays draining."""
    verb = MODES[preview.mode]
    wanted = AdminState.DRAINING if verb == "drain" else AdminState.CORDONED
    fenced = []
    for host in Host.objects.filter(pk__in=preview.fence_host_ids).order_by("name"):
        if host.admin_state not in (wanted, AdminState.DRAINING):
            host_admin_action(host=host, verb=verb, actor=actor)
        fenced.append(host.name)
    return fenced


def _move_gpus(gpu_ids: Sequence[int], pool: Pool, actor: str) -> int:
    sources = set(Gpu.objects.filter(pk__in=gpu_ids).values_list("pool_id", flat=True))
    moved = gpus_move(gpus=Gpu.objects.filter(pk__in=gpu_ids), pool=pool)
    audit(actor=actor, action="capacity.move", obj=pool, message=f"moved {moved} GPU(s) to pool {pool.name}",
          data={"gpu_ids": list(gpu_ids), "to": pool.name}).save()
    for pool_id in sources | {pool.pk}:
        transaction.on_commit(partial(request_pass, pool_id))
    return moved


def lease_outcome_counts(preview: CapacityPreview) -> list[tuple[str, str, int]]:
    """(outcome, label, number of leases) for each outcome present, most severe first."""
    counts = Counter(i.outcome for i in preview.leases)
    return [(key, label, counts[key]) for key, label in OUTCOMES.items() if counts[key]]
