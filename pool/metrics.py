"""Prometheus series computed at scrape time from the database (no state kept in the process), so
every web process serves the same numbers whichever worker did the work.

Gauges: GPUs by pool and state, leases by pool and state, pending leases per pool and pending code, GPUs each team
holds per pool, ledger drift per check. Counters and histograms from durable rows: preemptions by
pool and cause (the `lease.preempt` audit events), and the admission time of every lease ever
granted (created → granted). Each series is one grouped query; the admission histogram scans the
granted leases once per scrape (tens of milliseconds at 100,000 leases on PostgreSQL).
Process-local series (task runs, pass durations) are in `core.tasks.TASK_METRICS`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# Seconds from request to grant: a pass starts within milliseconds of a request, and a lease may
# wait hours for capacity.
ADMISSION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
                     4 * 3600.0, 24 * 3600.0)


class PoolCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield _gpus()
        yield from _leases()
        yield _team_gpus_held()
        yield _preemptions()
        yield _admission()
        yield _ledger_drift()


def _gpus() -> GaugeMetricFamily:
    from django.db.models import Count

    from inventory.models import Gpu

    gpus = GaugeMetricFamily("gpupool_gpus", "GPUs by pool and state", labels=["pool", "state"])
    for row in Gpu.objects.filter(gone=False).values("pool__name", "state").annotate(n=Count("pk")):
        gpus.add_metric([row["pool__name"], row["state"]], row["n"])
    return gpus


def _leases() -> Iterator[GaugeMetricFamily]:
    from django.db.models import Count

    from allocation.choices import ACTIVE_STATES
    from allocation.models import Lease
    from inventory.models import Pool

    leases = GaugeMetricFamily("gpupool_leases", "Leases by pool and state", labels=["pool", "state"])
    for row in Lease.objects.filter(state__in=ACTIVE_STATES).values("pool__name", "state").annotate(n=Count("pk")):
        leases.add_metric([row["pool__name"], row["state"]], row["n"])
    yield leases
    yield _pending(dict(Pool.objects.values_list("pk", "name")))


def _pending(names: dict[int, str]) -> GaugeMetricFamily:
    """Pending leases by pool and why they wait (`code`, allocation.policy.codes); summed over
    `code`, a pool's queue. Every known code of every pool has a series, 0 when none waits so."""
    from allocation.policy.codes import PendingCode
    from allocation.selectors import pending_by_code

    pending = GaugeMetricFamily("gpupool_leases_pending", "Pending leases by pool and pending code",
                                labels=["pool", "code"])
    counts = pending_by_code()
    known = [code.value for code in PendingCode]
    for pool_id, name in sorted(names.items(), key=lambda item: item[1]):
        for code in (*known, *sorted(c for p, c in counts if p == pool_id and c not in known)):
            pending.add_metric([name, code], counts.get((pool_id, code), 0))
    return pending


def _team_gpus_held() -> GaugeMetricFamily:
    from allocation.models import Team
    from allocation.selectors import team_gpus_held
    from inventory.models import Pool

    held = GaugeMetricFamily("gpupool_team_gpus_held", "GPUs each team holds, by pool",
                             labels=["team", "pool"])
    teams, pools = dict(Team.objects.values_list("pk", "name")), dict(Pool.objects.values_list("pk", "name"))
    for (team_id, pool_id), in_pool in team_gpus_held().items():
        held.add_metric([teams[team_id], pools[pool_id]], in_pool.gpus)
    return held


def _preemptions() -> CounterMetricFamily:
    """From the audit log: a `lease.preempt` event per preemption, its cause in its data (events
    older than the cause field count as `unknown`)."""
    from django.db.models import Count
    from django.db.models.fields.json import KT

    from allocation.models import AuditEvent

    total = CounterMetricFamily("gpupool_preemptions", "Preemptions by pool and cause",
                                labels=["pool", "cause"])
    rows = AuditEvent.objects.filter(action="lease.preempt").values(
        "lease__pool__name", cause=KT("data__cause")).annotate(n=Count("pk")).order_by()
    for row in rows:
        total.add_metric([row["lease__pool__name"] or "", row["cause"] or "unknown"], row["n"])
    return total


def _admission() -> HistogramMetricFamily:
    """Request to grant of every lease ever granted, per pool (a lease granted again after a
    requeue counts its last grant): one grouped scan, the buckets summed in SQL."""
    from django.db import connection

    waited = "EXTRACT(EPOCH FROM l.granted_at - l.created_at)"
    buckets = ", ".join(f"SUM(CASE WHEN w <= {b!r} THEN 1 ELSE 0 END)" for b in ADMISSION_BUCKETS)
    sql = (f"SELECT p.name, COUNT(*), SUM(w), {buckets} FROM (SELECT l.pool_id, {waited} AS w "
           "FROM allocation_lease l WHERE l.granted_at IS NOT NULL) x "
           "JOIN inventory_pool p ON p.id = x.pool_id GROUP BY p.name ORDER BY p.name")
    family = HistogramMetricFamily("gpupool_admission_seconds", "Seconds from request to grant",
                                   labels=["pool"])
    with connection.cursor() as cur:
        cur.execute(sql)
        for pool, count, total, *within in cur.fetchall():
            counts = [(str(b), int(n or 0)) for b, n in zip(ADMISSION_BUCKETS, within, strict=True)]
            family.add_metric([pool], [*counts, ("+Inf", int(count))], float(total or 0.0))
    return family


def _ledger_drift() -> GaugeMetricFamily:
    """Rows breaking each ledger invariant (allocation.selectors.invariants), computed at scrape time:
    anything above 0 is worth an alert."""
    from allocation.selectors.invariants import ledger_check

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
