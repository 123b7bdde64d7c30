"""Celery tasks of the inventory: thin wrappers over discovery services."""

from __future__ import annotations

from django.core.cache import cache

from core.tasks import gpupool_task
from inventory.discovery import source_discover, sources_due
from inventory.models import Source
from inventory.sync import hosts_mark_stale


@gpupool_task(name="inventory.discover_due_sources")
def discover_due_sources() -> int:
    """Fan out one discovery task per source whose interval has elapsed."""
    hosts_mark_stale()
    due = sources_due()
    for source in due:
        # One discovery per source at a time: a slow SSH fleet must not pile up tasks.
        if cache.add(f"gpupool:discovering:{source.pk}", 1, timeout=max(source.interval_s, 30)):
            discover_source.delay(source.pk)
    return len(due)


@gpupool_task(name="inventory.discover_source", soft_time_limit=300, time_limit=330)
def discover_source(source_id: int) -> None:
    try:
        source = Source.objects.filter(pk=source_id).first()
        if source is not None:
            source_discover(source=source)
    finally:
        cache.delete(f"gpupool:discovering:{source_id}")
