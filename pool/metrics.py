"""Prometheus gauges computed at scrape time from the database (no state kept in the process)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class PoolCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        from django.db.models import Count

        from allocation.models import Lease
        from inventory.models import Gpu

        gpus = GaugeMetricFamily("gpupool_gpus", "GPUs by pool and state", labels=["pool", "state"])
        for row in Gpu.objects.filter(gone=False).values("pool__name", "state").annotate(n=Count("pk")):
            gpus.add_metric([row["pool__name"], row["state"]], row["n"])
        yield gpus
        leases = GaugeMetricFamily("gpupool_leases", "Leases by pool and state", labels=["pool", "state"])
        for row in Lease.objects.filter(state__in=["pending", "granted", "bound"]).values(
                "pool__name", "state").annotate(n=Count("pk")):
            leases.add_metric([row["pool__name"], row["state"]], row["n"])
        yield leases
        yield _ledger_drift()


def _ledger_drift() -> GaugeMetricFamily:
    """Rows breaking each ledger invariant (allocation.ledger_check), computed at scrape time:
    anything above 0 is worth an alert."""
    from allocation.ledger_check import ledger_check

    drift = GaugeMetricFamily("gpupool_ledger_drift", "Rows breaking a ledger invariant, by check",
                              labels=["check"])
    for check, count in ledger_check().counts().items():
        drift.add_metric([check], count)
    return drift


_REGISTRY: CollectorRegistry | None = None


def registry() -> CollectorRegistry:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = CollectorRegistry()
        _REGISTRY.register(PoolCollector())
    return _REGISTRY
