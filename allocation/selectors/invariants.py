"""The allocation ledger's invariants, checked on a live database: who holds which GPU, as the
lease rows, their GPU links and the GPU rows each say it, must agree.

Each check is one read-only query returning the offending rows (at most `EXAMPLES` shown, all
counted). The database already refuses a GPU in two active links (a partial unique index); the
other rules are kept by code in one transaction per write, so drift here means a bug, a manual
edit or a restore from an inconsistent backup. `manage.py check_ledger` prints the findings and
exits non-zero on any; the periodic task `allocation.check_ledger` records an audit alert, and
`/metrics` exposes the counts as `gpupool_ledger_drift{check}`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection

from allocation.choices import END_STATES, HOLDING_STATES, LeaseState
from inventory.services import gpu_state_sql

EXAMPLES = 5


def _states(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in states)  # choice values: identifiers, no quoting needed


# check name -> (what it means, SQL yielding one id per offending row)
CHECKS: dict[str, tuple[str, str]] = {
    "gpu_in_two_leases": (
        "a GPU in more than one active lease",
        "SELECT lg.gpu_id FROM allocation_leasegpu lg WHERE lg.active "
        "GROUP BY lg.gpu_id HAVING COUNT(*) > 1"),
    "ended_lease_holds_gpus": (
        "a lease that ended (its workload stopped) still linked to GPUs",
        "SELECT DISTINCT lg.lease_id FROM allocation_leasegpu lg "
        "JOIN allocation_lease l ON l.id = lg.lease_id "
        f"WHERE lg.active AND l.state IN ({_states(END_STATES)}) AND l.ending_since IS NULL"),
    "pending_lease_holds_gpus": (
        "a pending lease linked to GPUs",
        "SELECT DISTINCT lg.lease_id FROM allocation_leasegpu lg "
        "JOIN allocation_lease l ON l.id = lg.lease_id "
        f"WHERE lg.active AND l.state = '{LeaseState.PENDING.value}'"),
    "holding_lease_gpu_count": (
        "a granted or bound lease holding another number of GPUs than it was granted",
        "SELECT l.id FROM allocation_lease l LEFT JOIN allocation_leasegpu lg "
        "ON lg.lease_id = l.id AND lg.active "
        f"WHERE l.state IN ({_states(HOLDING_STATES)}) GROUP BY l.id, l.gpu_count "
        "HAVING COUNT(lg.id) <> l.gpu_count"),
    "running_usage_sums": (
        "a team whose running GPUs, granted less ended in the running usage's sums "
        "(allocation.running_usage), are not those its running leases hold",
        "SELECT COALESCE(r.team_id, s.team_id) FROM (SELECT l.team_id, SUM(l.gpu_count) AS n FROM allocation_lease l "
        f"WHERE l.state IN ({_states(HOLDING_STATES)}) AND l.granted_at IS NOT NULL AND l.ended_at IS NULL "
        "GROUP BY l.team_id) r FULL JOIN (SELECT x.team_id, SUM(x.n) AS n FROM ("
        "SELECT team_id, gpus AS n FROM allocation_grantledger UNION ALL "
        "SELECT team_id, -ended_gpus FROM allocation_usageledger) x GROUP BY x.team_id) s ON s.team_id = r.team_id "
        "WHERE COALESCE(r.n, 0) <> COALESCE(s.n, 0)"),
    "gpu_leased_flag": (
        "a GPU marked leased without an active lease, or held by one and not marked",
        "SELECT g.id FROM inventory_gpu g WHERE g.leased <> EXISTS ("
        "SELECT 1 FROM allocation_leasegpu lg WHERE lg.gpu_id = g.id AND lg.active)"),
    "gpu_state": (
        "a GPU whose stored state is not the one its flags and host give",
        "SELECT g.id FROM inventory_gpu g JOIN inventory_host h ON h.id = g.host_id "
        f"WHERE g.state <> {gpu_state_sql(gpu='g', host_state='h.state')}"),
}


@dataclass
class Finding:
    check: str
    meaning: str
    count: int
    examples: list[str] = field(default_factory=list)


@dataclass
class LedgerReport:
    findings: list[Finding]
    gpus: int
    holding_leases: int

    @property
    def ok(self) -> bool:
        return not self.findings

    def counts(self) -> dict[str, int]:
        """Offending rows per check, every check named (0 where it holds)."""
        found = {f.check: f.count for f in self.findings}
        return {name: found.get(name, 0) for name in CHECKS}

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "gpus": self.gpus, "holding_leases": self.holding_leases,
                "findings": [vars(f) for f in self.findings]}


def ledger_check() -> LedgerReport:
    """Run every check (read-only, one query each, plus two counts)."""
    findings = []
    with connection.cursor() as cur:
        for name, (meaning, sql) in CHECKS.items():
            cur.execute(sql)
            rows = cur.fetchall()
            if rows:
                findings.append(Finding(name, meaning, len(rows), [str(r[0]) for r in rows[:EXAMPLES]]))
        cur.execute("SELECT COUNT(*) FROM inventory_gpu")
        gpus = cur.fetchone()[0]
        cur.execute(f"SELECT COUNT(*) FROM allocation_lease WHERE state IN ({_states(HOLDING_STATES)})")
        holding = cur.fetchone()[0]
    return LedgerReport(findings, gpus, holding)
