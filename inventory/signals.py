"""Signals the inventory sends so that allocation can react without inventory importing it."""

from django.dispatch import Signal

# gpu_ids: list[int] of leased GPUs that vanished; reason: str.
gpus_vanished = Signal()
# pool_ids: set[int] of pools whose schedulable capacity may have changed.
inventory_changed = Signal()
