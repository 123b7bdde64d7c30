"""Inventory's own reactions to its signals."""

from typing import Any

from django.dispatch import receiver

from inventory.selectors import forget_capacity_profiles
from inventory.signals import inventory_changed


@receiver(inventory_changed)
def on_inventory_changed(sender: Any, pool_ids: set[int], **kwargs: Any) -> None:
    forget_capacity_profiles(pool_ids)
