"""Prometheus series computed at scrape time from the database (no state kept in the process), so
every web process serves the same numbers whichever worker did the work.

Gauges: GPUs by pool and state, leases by pool and state, pending leases per pool and pending code, GPUs each team
holds per pool, allocated GPUs sitting idle per pool and team, ledger drift per check. Counters
and histograms from durable rows: preemptions by pool and cause (the `lease.preempt` audit events:
the pass's causes, idle reclaim, an admin's drain), and the admission time of every lease ever
granted (created → granted). Each series is one grouped query; the admission histogram scans the
granted leases once per scrape (tens of milliseconds at 100,000 leases on PostgreSQL).
Process-local series (task runs, pass durations) are in `core.tasks.TASK_METRICS`.

Every series whose labels are known in advance is exported from the start, at 0: each pool (by
state, cause), each team and pool pair, each check, as Prometheus' own guidance asks, so an alert
on `rate(gpupool_preemptions_total[5m])` or a panel of `gpupool_leases_pending` sees an idle pool
as 0 rather than as nothing. The pools and teams are read once per scrape (two small queries).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import product
from typing import TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# Seconds from request to grant: a pass starts within milliseconds of a request, and a lease may
# wait hours for capacity.
ADMISSION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
                     4 * 3600.0, 24 * 3600.0)


K = TypeVar("K", bound=tuple[str, ...])


@dataclass(frozen=True)
class Known:
    """What the label values can be, read at scrape time: pool and team names by id."""

    pools: Mapping[int, str]
    teams: Mapping[int, str]

    @staticmethod
    def read() -> Known:
        from allocation.models import Team
        from inventory.models import Pool

        return Known(dict(Pool.objects.values_list("pk", "name")), dict(Team.objects.values_list("pk", "name")))

    def team_pools(self) -> list[tuple[str, str]]:
        return list(product(sorted(self.teams.values()), sorted(self.pools.values())))


def _filled(family: GaugeMetricFamily | CounterMetricFamily, counts: Mapping[K, float], known: Iterable[K]) -> None:
    """Add a sample for every key of `known` (0 where `counts` has none) and of `counts`."""
    for key in sorted(set(known) | set(counts)):
        family.add_metric(list(key), counts.get(key, 0))


class PoolCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        known = Known.read()
        yield _gpus(known)
        yield from _leases(known)
        yield _team_gpus_held(known)
        yield _idle_allocated(known)
        yield _preemptions(known)
        yield _admission(known)
        yield _ledger_drift()


def _gpus(known: Known) -> GaugeMetricFamily:
    from django.db.models import Count

    from inventory.choices import GpuState
    from inventory.models import Gpu

    gpus = GaugeMetricFamily("gpupool_gpus", "GPUs by pool and state", labels=["pool", "state"])
    counts = {(row["pool__name"], row["state"]): row["n"]
              for row in Gpu.objects.filter(gone=False).values("pool__name", "state").annotate(n=Count("pk"))}
    _filled(gpus, counts, product(known.pools.values(), GpuState.values))
    return gpus


def _leases(known: Known) -> Iterator[GaugeMetricFamily]:
    from django.db.models import Count

    from allocation.choices import ACTIVE_STATES
    from allocation.models import Lease

    leases = GaugeMetricFamily("gpupool_leases", "Leases by pool and state", labels=["pool", "state"])
    counts = {(row["pool__name"], row["state"]): row["n"] for row in
              Lease.objects.filter(state__in=ACTIVE_STATES).values("pool__name", "state").annotate(n=Count("pk"))}
    _filled(leases, counts, product(known.pools.values(), [str(state) for state in ACTIVE_STATES]))
    yield leases
    yield _pending(known)


def _pending(known: Known) -> GaugeMetricFamily:
    """Pending leases by pool and why they wait (`code`, allocation.policy.codes); summed over
    `code`, a pool's queue. Every known code of every pool has a series, 0 when none waits so."""
    from allocation.policy.codes import PendingCode
    from allocation.selectors import pending_by_code

    pending = GaugeMetricFamily("gpupool_leases_pending", "Pending leases by pool and pending code",
                                labels=["pool", "code"])
    counts = {(known.pools[pool_id], code): n for (pool_id, code), n in pending_by_code().items()}
    _filled(pending, counts, product(known.pools.values(), [code.value for code in PendingCode]))
    return pending


def _team_gpus_held(known: Known) -> GaugeMetricFamily:
    from allocation.selectors import team_gpus_held

    held = GaugeMetricFamily("gpupool_team_gpus_held", "GPUs each team holds, by pool",
                             labels=["team", "pool"])
    counts = {(known.teams[team_id], known.pools[pool_id]): in_pool.gpus
              for (team_id, pool_id), in_pool in team_gpus_held().items()}
    _filled(held, counts, known.team_pools())
    return held


def _idle_allocated(known: Known) -> GaugeMetricFamily:
    """Leased GPUs whose utilisation has stayed below the idle threshold for the idle time
    (allocation.selectors.idle), as of the latest idle check."""
    from allocation.selectors.idle import idle_gpus_by_team_and_pool

    idle = GaugeMetricFamily("gpupool_gpus_idle_allocated", "Leased GPUs sitting idle (utilisation below the "
                             "threshold for the idle time), by pool and team", labels=["pool", "team"])
    counts = {(known.pools[pool_id], known.teams[team_id]): n
              for (team_id, pool_id), n in idle_gpus_by_team_and_pool().items()}
    _filled(idle, counts, [(pool, team) for team, pool in known.team_pools()])
    return idle


def _preemptions(known: Known) -> CounterMetricFamily:
    """From the audit log: a `lease.preempt` event per preemption, its cause in its data (events
    older than the cause field count as `unknown`)."""
    from django.db.models import Count
    from django.db.models.fields.json import KT

    from allocation.choices import PREEMPTION_CAUSES
    from allocation.models import AuditEvent

    total = CounterMetricFamily("gpupool_preemptions", "Preemptions by pool and cause",
                                labels=["pool", "cause"])
    rows = AuditEvent.objects.filter(action="lease.preempt").values(
        "lease__pool__name", cause=KT("data__cause")).annotate(n=Count("pk")).order_by()
    counts = {(row["lease__pool__name"] or "", row["cause"] or "unknown"): row["n"] for row in rows}
    _filled(total, counts, product(known.pools.values(), PREEMPTION_CAUSES))
    return total


def _admission(known: Known) -> HistogramMetricFamily:
    """Request to grant of every lease ever granted, per pool (a lease granted again after a
    requeue counts its last grant): one grouped scan, the buckets summed in SQL. A pool that never
    granted has its empty histogram."""
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
        found = {pool: (int(count), float(total or 0.0), within) for pool, count, total, *within in cur.fetchall()}
    for pool in sorted(set(known.pools.values()) | set(found)):
        count, total, within = found.get(pool, (0, 0.0, [0] * len(ADMISSION_BUCKETS)))
        counts = [(str(b), int(n or 0)) for b, n in zip(ADMISSION_BUCKETS, within, strict=True)]
        family.add_metric([pool], [*counts, ("+Inf", count)], total)
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
