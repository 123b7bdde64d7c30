"""Admin actions on capacity: cordon/drain/uncordon hosts, move GPUs between pools."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from allocation.choices import HOLDING_STATES, LeaseState
from allocation.leases import audit, lease_end
from allocation.models import Lease
from allocation.triggers import request_pass, request_unbind
from inventory.models import Gpu, Host, Pool
from inventory.services import gpus_move, host_cordon, host_drain, host_uncordon
from pool.errors import DomainError


def host_admin_action(*, host: Host, verb: str, actor: str) -> Host:
    """cordon: no new leases; drain: cordon and end its leases with notice; uncordon: undo."""
    actions = {"cordon": host_cordon, "drain": host_drain, "uncordon": host_uncordon}
    if verb not in actions:
        raise DomainError(f"unknown host action {verb!r}")
    with transaction.atomic():
        host = actions[verb](host=host)
        audit(actor=actor, action=f"host.{verb}", obj=host, message=f"{verb} host {host.name}").save()
        if verb == "drain":
            for lease in Lease.objects.select_for_update().filter(host=host, state__in=HOLDING_STATES):
                lease_end(lease, LeaseState.PREEMPTED, actor=actor, keep_gpus=True,
                          reason=f"host {host.name} drained by {actor}")
                if lease.binding_status.get("handle"):
                    transaction.on_commit(lambda pk=lease.pk: request_unbind(pk))
    return host


def capacity_move(*, gpu_ids: Sequence[int], pool: Pool, actor: str) -> int:
    """Move GPUs to `pool`; running leases keep their GPUs until they end."""
    with transaction.atomic():
        sources = set(Gpu.objects.filter(pk__in=gpu_ids).values_list("pool_id", flat=True))
        moved = gpus_move(gpus=Gpu.objects.filter(pk__in=gpu_ids), pool=pool)
        audit(actor=actor, action="capacity.move", obj=pool,
              message=f"moved {moved} GPU(s) to pool {pool.name}",
              data={"gpu_ids": list(gpu_ids), "to": pool.name}).save()
    for pool_id in sources | {pool.pk}:
        request_pass(pool_id)
    return moved
