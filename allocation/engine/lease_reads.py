"""The pool's leases as a pass reads them: those holding its GPUs, and its pending queue with each
row's version (allocation/engine/snapshot.py reads the rest of the pool and keeps the versions).

Team and priority class come as ids, named in Python (`Names`): joined in SQL, a table never
analysed (autovacuum off) got a nested loop, two index look-ups a lease (8,800 of the 9,125 pages
of a whole read of 2,200 pending leases; 187 with statistics).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection

from allocation.choices import LeaseState
from allocation.policy.where import selector_of
from core.db.statements import execute_named


def read(sql: str, params: dict[str, Any], *, prepared: bool = True) -> list[tuple[Any, ...]]:
    """The rows of one of the pass's reads: a prepared statement (parsed once a session, planned
    as PostgreSQL chooses: tests/allocation/test_pass_reads_history.py checks the plans for the
    values and the generic ones), or (`prepared=False`) planned for its values every time. The
    reads by a list of ids are the latter: after five executions PostgreSQL took the generic
    plan of the pending read by id, estimated for ten ids, a sequential scan testing each row
    against thousands (120 ms a pass in a Kueue run, against 5 ms planned for the values)."""
    with connection.cursor() as cur:
        if prepared:
            execute_named(cur, sql, params)
        else:
            cur.execute(sql, params)
        return list(cur.fetchall())


# Leases of the pool holding GPUs (granted, bound, or ended and still waiting for their workload),
# by id, once their links are known (`holding_rows`).
HOLDING_SQL = """
SELECT l.id::text, l.team_id, l.state, l.priority_class_id,
       EXTRACT(EPOCH FROM l.granted_at)::float8, l.borrowed, EXTRACT(EPOCH FROM l.expires_at)::float8
FROM allocation_lease l
WHERE {where}
"""

# The pool's pending leases, each with its row version (the transaction that wrote it, and where:
# two versions written by one transaction are at two places, so the pair tells any two apart, in
# tests run in one transaction too): the narrow read of every pass. Only those whose version
# differs from the one this process read before are read whole (PENDING_SQL, by id), so a pass
# over a queue of thousands, where a pass changes the first hundred explanations and a few leases
# come and go, reads those few.
def version_sql(alias: str) -> str:
    """A row's version, as the pass compares it (the row of `alias`)."""
    return f"{alias}.xmin::text || {alias}.ctid::text"


_VERSION = version_sql("l")
PENDING_VERSIONS_SQL = f"""
SELECT l.id::text, {_VERSION} FROM allocation_lease l
WHERE l.pool_id = %(pool)s AND l.state = '{LeaseState.PENDING.value}'
ORDER BY l.created_at DESC, l.id
"""
# The selector is NULL for none: most leases have none, and a NULL costs no JSON decoding.
PENDING_SQL = f"""
SELECT l.id::text, l.team_id, l.priority_class_id,
       EXTRACT(EPOCH FROM l.created_at)::float8,
       l.gpu_count, l.model, l.min_memory_mb, l.same_host, l.min_driver_version, l.min_cuda_version,
       l.ttl_seconds, l.binding_spec <> '{{}}'::jsonb, l.pending_code, l.reason, l.queue_position,
       l.estimated_start, l.binding_kind, NULLIF(l.selector, '{{}}'::jsonb),
       COALESCE(l.topology->>'within', ''), COALESCE(l.topology->>'mode', '') = 'required', {_VERSION}
FROM allocation_lease l
WHERE {{where}} AND l.state = %(pending)s
"""

# The two ways a read names its leases: the pool's (prepared), or by id (planned for the ids, `read`).
BY_POOL = "l.pool_id = %(pool)s"
BY_IDS = "l.id = ANY(%(ids)s::uuid[])"

CLASS_SQL = """
SELECT id, name, value, preemptible, min_runtime_s, grace_s FROM allocation_priorityclass ORDER BY value DESC, name
"""
TEAM_SQL = "SELECT id, name FROM allocation_team"


class Names:
    """Team names and priority classes (name, value, preemptible, min_runtime_s, grace_s) by id:
    those given (the pass's context, allocation.engine.pass_context), or read, and read again for
    an id not seen (a team or class committed after, which a lease read later may already name;
    `missed` tells the pass so)."""

    def __init__(self, teams: dict[int, str] | None = None,
                 classes: dict[int, tuple[str, int, bool, int, int]] | None = None) -> None:
        self.teams: dict[int, str] = dict(teams or {})
        self.classes: dict[int, tuple[str, int, bool, int, int]] = dict(classes or {})
        self.missed = False
        if teams is None or classes is None:
            self._refresh()

    def _refresh(self) -> None:
        self.teams.update(read(TEAM_SQL, {}))
        self.classes.update((row[0], row[1:]) for row in read(CLASS_SQL, {}))

    def _miss(self) -> None:
        self.missed = True
        self._refresh()

    def team(self, team_id: int) -> str:
        if team_id not in self.teams:
            self._miss()
        return self.teams[team_id]

    def klass(self, class_id: int) -> tuple[str, int, bool, int, int]:
        if class_id not in self.classes:
            self._miss()
        return self.classes[class_id]


class PendingRow(NamedTuple):
    """A pending lease as the pass needs it: the request, and its explanation as stored."""

    lease_id: str
    team_id: int
    team: str
    priority: int
    preemptible: bool
    min_runtime_s: int
    created_at: float
    gpus: int
    model: str
    min_memory_mb: int
    same_host: bool
    min_driver_version: str
    min_cuda_version: str
    ttl_seconds: int
    has_binding: bool
    pending_code: str
    reason: str
    queue_position: int | None
    estimated_start: datetime | None
    binding_kind: str = ""
    selector: str = ""  # its tag (allocation.policy.where)
    within: str = ""  # its topology (allocation.policy.topology)
    within_required: bool = False


def holding_rows(links: list[tuple[str, int]], names: Names) -> list[tuple[Any, ...]]:
    """(lease_id, team, state, priority, preemptible, min_runtime_s, granted_at, borrowed,
    expires_at, gpu_ids) of every lease of the pool with active GPU links (`links`: lease id,
    GPU id), in lease id order."""
    held: dict[str, list[int]] = {}
    for lease_id, gpu_id in links:
        held.setdefault(lease_id, []).append(gpu_id)
    if not held:
        return []
    # By id: a lease with active links is the pool's whatever its state (holding, ending).
    rows = {r[0]: r for r in read(HOLDING_SQL.format(where=BY_IDS), {"ids": list(held)}, prepared=False)}
    out = []
    for lease_id in sorted(held):
        _, team_id, state, class_id, granted, borrowed, expires = rows[lease_id]
        _, prio, preemptible, min_rt, _ = names.klass(class_id)
        out.append((lease_id, names.team(team_id), state, prio, bool(preemptible), min_rt, granted, bool(borrowed),
                    expires, tuple(sorted(held[lease_id]))))
    return out


def pending_rows(pool_id: int, known: dict[str, tuple[str, PendingRow]],
                  names: Names) -> dict[str, tuple[str, PendingRow]]:
    """Every pending lease of the pool, newest first (the order of the versions read), with its
    row version: those `known` at the same version as they were, the others read whole (one
    query; none when nothing changed). A lease that stops pending between the two reads is left
    out, as if the first had not seen it."""
    rows: dict[str, tuple[str, PendingRow] | None] = {}
    stale = []
    for lease_id, version in read(PENDING_VERSIONS_SQL, {"pool": pool_id}):
        hit = known.get(lease_id)
        rows[lease_id] = hit if hit is not None and hit[0] == version else None
        if rows[lease_id] is None:
            stale.append(lease_id)
    if stale:
        # Most of the queue new to this process (its first pass, or after every explanation was
        # written): the pool's pending leases in one scan, not tens of thousands of ids in a list.
        where, params = (BY_POOL, {"pool": pool_id}) if 2 * len(stale) > len(rows) else (BY_IDS, {"ids": stale})
        # replace, not format: the text holds JSON literals in braces
        for r in read(PENDING_SQL.replace("{where}", where), {**params, "pending": LeaseState.PENDING.value},
                      prepared=where == BY_POOL):
            if r[0] in rows:  # not one that began pending between the two reads: its place is unknown
                _, prio, preemptible, min_rt, _ = names.klass(r[2])
                rows[r[0]] = (r[20], PendingRow._make((r[0], r[1], names.team(r[1]), prio, preemptible, min_rt,
                                                       *r[3:17], selector_tag(r[17]), r[18], bool(r[19]))))
    return {lease_id: row for lease_id, row in rows.items() if row is not None}


def json_value(value: Any) -> Any:
    """A JSON column read through a raw cursor (Django's connection leaves jsonb as text)."""
    return json.loads(value) if isinstance(value, str) else value


def selector_tag(selector: Any) -> str:
    return "" if selector is None else selector_of(json_value(selector)).tag
