"""The ledger's invariants, read with SQL from the stack's own database: sampled during a scenario
(every check in one REPEATABLE READ snapshot, so a sample sees one moment) and checked after it.

- the checks of `manage.py check_ledger` (allocation.selectors.invariants.CHECKS): no GPU in two active
  leases, every ended lease freed its GPUs, a holding lease holds what it was granted, GPU flags
  and states agree with the links;
- the fair-share ledger equals the sum of the grants' metered intervals (LeaseUsage rows), and
  every holding lease has exactly one open meter row, no ended lease one;
- no lease ended before it was granted;
- once the load stops, nothing eligible stays pending: no pending lease whose GPU count fits in
  the free GPUs of one schedulable host of its pool.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import psycopg2

from allocation.selectors.invariants import CHECKS

LEDGER_VS_METER = """
WITH h AS (SELECT COALESCE(MAX(fair_share_half_life_hours), 168) * 3600.0 AS s
           FROM allocation_schedulersettings),
     t AS (SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 AS now),
     metered AS (
       SELECT u.team_id, SUM(u.gpu_equiv * h.s / ln(2) * (
                power(2, -(t.now - EXTRACT(EPOCH FROM u.ended_at)) / h.s)
              - power(2, -(t.now - EXTRACT(EPOCH FROM u.started_at)) / h.s))) AS usage
       FROM allocation_leaseusage u, h, t
       WHERE u.ended_at IS NOT NULL AND u.ended_at > u.started_at GROUP BY u.team_id),
     ledger AS (  -- a team's stripes, each decayed from its own as_of, summed
       SELECT l.team_id, SUM(l.closed_usage * power(2, -(t.now - EXTRACT(EPOCH FROM l.as_of)) / h.s)) AS usage
       FROM allocation_usageledger l, h, t GROUP BY l.team_id)
SELECT tm.name, COALESCE(ledger.usage, 0), COALESCE(metered.usage, 0)
FROM allocation_team tm LEFT JOIN ledger ON ledger.team_id = tm.id LEFT JOIN metered ON metered.team_id = tm.id
"""

EXTRA_CHECKS = {
    "ended_before_granted": "SELECT id FROM allocation_lease WHERE ended_at < granted_at",
    "holding_lease_meter": (
        "SELECT l.id FROM allocation_lease l LEFT JOIN allocation_leaseusage u "
        "ON u.lease_id = l.id AND u.ended_at IS NULL WHERE l.state IN ('granted', 'bound') "
        "GROUP BY l.id HAVING COUNT(u.id) <> 1"),
    "ended_lease_meter_open": (
        "SELECT DISTINCT u.lease_id FROM allocation_leaseusage u JOIN allocation_lease l ON l.id = u.lease_id "
        "WHERE u.ended_at IS NULL AND l.state NOT IN ('granted', 'bound')"),
}

ELIGIBLE_PENDING = """
SELECT l.id, l.gpu_count, p.name, l.reason FROM allocation_lease l JOIN inventory_pool p ON p.id = l.pool_id
WHERE l.state = 'pending' AND l.gpu_count <= (
  SELECT COALESCE(MAX(free), 0) FROM (
    SELECT COUNT(*) AS free FROM inventory_gpu g JOIN inventory_host h ON h.id = g.host_id
    WHERE g.pool_id = l.pool_id AND g.state = 'free' AND h.state = 'ready' GROUP BY g.host_id) per_host)
"""


def connect(url: str) -> Any:
    conn = psycopg2.connect(url, connect_timeout=3)
    conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
    return conn


def snapshot(conn: Any) -> dict[str, list[str]]:
    """Every row-level check in one snapshot: {check: offending ids} (empty lists where it holds)."""
    found: dict[str, list[str]] = {}
    with conn.cursor() as cur:
        for name, (_, sql) in CHECKS.items():
            cur.execute(sql)
            found[name] = [str(r[0]) for r in cur.fetchall()]
        for name, sql in EXTRA_CHECKS.items():
            cur.execute(sql)
            found[name] = [str(r[0]) for r in cur.fetchall()]
        cur.execute(LEDGER_VS_METER)
        found["ledger_vs_meter"] = [f"{team}: ledger {a:.3f} vs meter {b:.3f}" for team, a, b in cur.fetchall()
                                    if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-3)]
    conn.rollback()
    return found


def final_check(url: str) -> dict[str, list[str]]:
    conn = connect(url)
    try:
        return {k: v for k, v in snapshot(conn).items() if v}
    finally:
        conn.close()


ENDING = "SELECT COUNT(*) FROM allocation_lease WHERE ending_since IS NOT NULL"


def ending_leases(url: str) -> int:
    """Leases that ended but still hold GPUs (a drain's notice, a workload stopping): a pass
    keeps free GPUs beside them for the requests waiting for those, so 'eligible' is judged once
    there are none."""
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(ENDING)
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def eligible_pending(url: str) -> list[tuple[str, int, str, str]]:
    """(id, GPUs, pool, reason) of each pending lease that fits on a schedulable host now."""
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(ELIGIBLE_PENDING)
            return [(str(i), n, p, r) for i, n, p, r in cur.fetchall()]
    finally:
        conn.close()


class Sampler(threading.Thread):
    """Samples the invariants every `interval` seconds until stopped; a database that is down is
    counted as a missed sample, not a failure (the outage scenarios take it down on purpose)."""

    def __init__(self, url: str, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.url, self.interval = url, interval
        self.samples = self.missed = 0
        self.violations: list[tuple[float, str, list[str]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        conn = None
        while not self.halt.is_set():
            try:
                conn = conn or connect(self.url)
                for name, ids in snapshot(conn).items():
                    # The ledger is folded by the statement that ends a lease, the meter too: they
                    # agree in every snapshot, so a sample may judge them as well.
                    if ids:
                        self.violations.append((time.time(), name, ids[:5]))
                self.samples += 1
            except psycopg2.Error:
                self.missed += 1
                conn = None
            self.halt.wait(self.interval)
        if conn is not None:
            conn.close()

    def stop(self) -> Sampler:
        self.halt.set()
        self.join(timeout=30)
        return self
