"""The teams' running usage from sums the database keeps, not from every running lease.

A running lease of n GPUs granted at g has used, by t, n · h/ln2 · (1 − 2^(−(t − g)/h)) decayed
GPU-seconds (allocation.policy.fairshare.interval_usage). Summed over a team's running leases:

    h/ln2 · (N − W · 2^(−(t − a)/h)),   N = Σ n,   W = Σ n · 2^(−(a − g)/h) as of any a,

and W decays from one `a` to a later one as usage does. So the team's running usage needs N and W,
not its leases: a trigger on the lease table (migration allocation 0027) adds each lease that starts
running to `GrantLedger` (its team and pool's row: only that pool's pass grants there, under the
pool's lock, so passes of other pools never wait on it) and each that stops to `ended_gpus` and
`ended_weight` of its ledger stripe (the row its end writes already: releases of one team still
spread over the stripes). Running = granted − ended. Every writer is covered, the set-based pass,
the one-statement release, a bulk end and an admin's hand edit alike.

Before, each pass summed every running lease of the fleet (allocation.ledger.RUNNING_SQL): 25 ms
of PostgreSQL a pass at 50 pools × 2,000 GPUs on a slow machine, the largest read left there whose
cost grew with the fleet, not the pool. It stays the fallback: the weights depend on the
half-life, so while the setting differs from the one they were computed with (a change of
`scheduler.fair_share_half_life_hours` not yet rebuilt) the sums are not used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from django.db import connection

from allocation.policy.fairshare import LN2

# The ledger's and the grant ledger's arrays, and whether the weights are the half-life's.
SUMS_SQL = """
SELECT u.teams, u.closed, u.as_of, u.ended_gpus, u.ended_weight, g.teams, g.gpus, g.weight, g.as_of,
       NOT EXISTS (SELECT 1 FROM allocation_schedulersettings s WHERE s.id = 1
                   AND s.weights_half_life_hours IS DISTINCT FROM s.fair_share_half_life_hours) AS summed
FROM (SELECT array_agg(team_id) AS teams, array_agg(closed_usage) AS closed,
             array_agg(EXTRACT(EPOCH FROM as_of)::float8) AS as_of, array_agg(ended_gpus) AS ended_gpus,
             array_agg(ended_weight) AS ended_weight FROM allocation_usageledger) u
CROSS JOIN (SELECT array_agg(team_id) AS teams, array_agg(gpus) AS gpus, array_agg(weight) AS weight,
                   array_agg(EXTRACT(EPOCH FROM as_of)::float8) AS as_of FROM allocation_grantledger) g
"""
COLUMNS = 10  # of SUMS_SQL


def running_from_sums(arrays: Sequence[Any], t: float, h: float) -> dict[int, float]:
    """Each team's running usage at `t` (epoch seconds) from SUMS_SQL's arrays (the ledger's
    teams and as_of, columns 3–8): granted less ended GPUs and weights. A team that runs nothing
    has none, exactly; a team's total is never below 0 (a lease granted after `t`, by another pool's pass that
    committed first, counts a few negative GPU-milliseconds)."""
    ledger_teams, _, as_of, ended_gpus, ended_weight, g_teams, g_gpus, g_weight, g_as_of = (
        a or () for a in arrays[:9])
    gpus: dict[int, int] = {}
    weight: dict[int, float] = {}
    for team_id, n, w, a in zip(g_teams, g_gpus, g_weight, g_as_of, strict=True):
        gpus[team_id] = gpus.get(team_id, 0) + n
        weight[team_id] = weight.get(team_id, 0.0) + w * math.pow(0.5, (t - a) / h)
    for team_id, n, w, a in zip(ledger_teams, ended_gpus, ended_weight, as_of, strict=True):
        if n:
            gpus[team_id] = gpus.get(team_id, 0) - n
            weight[team_id] = weight.get(team_id, 0.0) - w * math.pow(0.5, (t - a) / h)
    return {team_id: max(0.0, h / LN2 * (n - weight[team_id])) for team_id, n in gpus.items() if n}


def rebuild() -> None:
    """The sums again from the lease rows, with the half-life now set (then passes use them):
    after a change of the half-life, or a drift `manage.py check_ledger` found. Writers of the
    sums wait until the caller's transaction commits."""
    with connection.cursor() as cur:
        cur.execute("SELECT allocation_rebuild_running_sums()")


def half_life_changed() -> bool:
    """Whether the weights were computed with another half-life than the one set."""
    with connection.cursor() as cur:
        cur.execute("SELECT weights_half_life_hours IS DISTINCT FROM fair_share_half_life_hours "
                    "FROM allocation_schedulersettings WHERE id = 1")
        row = cur.fetchone()
    return bool(row and row[0])
