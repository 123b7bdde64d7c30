"""Allocation's reactions to inventory signals (inventory never imports allocation)."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from allocation.choices import HOLDING_STATES
from allocation.models import Lease
from allocation.services.reaper import leases_mark_lost
from allocation.triggers import request_pass
from inventory.signals import gpus_vanished, inventory_changed


@receiver(gpus_vanished)
def on_gpus_vanished(sender: Any, gpu_ids: list[int], reason: str, **kwargs: Any) -> None:
    leases = list(Lease.objects.filter(state__in=HOLDING_STATES, gpu_links__gpu_id__in=gpu_ids,
                                       gpu_links__active=True).values_list("pk", flat=True).distinct())
    pools: set[int] = set()
    leases_mark_lost(leases, reason_prefix=reason, pools=pools)
    for pool_id in pools:
        request_pass(pool_id)


@receiver(inventory_changed)
def on_inventory_changed(sender: Any, pool_ids: set[int], **kwargs: Any) -> None:
    for pool_id in pool_ids:
        request_pass(pool_id)
