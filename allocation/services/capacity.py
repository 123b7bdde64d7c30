"""Capacity moves: GPUs or whole hosts to another pool, as previewed (`allocation.selectors.capacity_preview`).

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

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from django.db import transaction
from django.db.models import Q

from allocation.audit import audit
from allocation.engine import lock_pool
from allocation.selectors.capacity_preview import MODES, CapacityPreview, capacity_preview
from allocation.services.admin import host_admin_action
from allocation.triggers import request_pass
from core.errors import Conflict, DomainError
from inventory.choices import AdminState
from inventory.models import Gpu, Host, Pool
from inventory.services import gpus_move


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
        # The next pass's impacts only matter for checking what the admin reviewed (its
        # fingerprint); without one, computing them would hold the pools' locks for nothing.
        preview = capacity_preview(pool=pool, gpu_ids=gpu_ids, host_ids=host_ids, mode=mode,
                                   held_alone=held_alone, next_pass=bool(fingerprint))
        if preview.blocked:
            raise Conflict(preview.blocked[0], code="move_blocked")
        if not preview.gpu_ids:
            raise DomainError(f"nothing to move: no selected GPU is outside pool {pool.name}", code="nothing_to_move")
        if fingerprint and fingerprint != preview.fingerprint:
            raise Conflict("the fleet or its leases changed since the preview; review the new preview",
                           code="preview_stale", details={"fingerprint": [
                               "no longer matches what the move would do; preview it again"]})
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
