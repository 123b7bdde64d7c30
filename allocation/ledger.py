"""The fair-share ledger: exponentially decayed GPU-seconds per team, kept in the database.

usage(now) = closed · 2^(−(now − as_of)/h) + Σ over running leases of gpus · ∫ 2^(−(now − t)/h) dt,
where `closed` accumulates leases that have ended. The integral has a closed form, so the ledger is
exact (no sampling) and can be rebuilt from lease rows at any time (`rebuild_ledger`). The
arithmetic is the policy's (allocation.policy.fairshare: `decay`, `interval_usage`); this module
reads and writes the rows, and `ledger_close_sql` is the one SQL twin (for the one-statement end
of a lease), held equal to the policy by a property test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from allocation import running_usage
from allocation.choices import HOLDING_STATES
from allocation.models import Lease, SchedulerSettings, Team, UsageLedger
from allocation.policy import fairshare
from allocation.policy.fairshare import LN2, NEGLIGIBLE, decay, interval_usage
from allocation.policy.types import TeamView
from allocation.running_usage import COLUMNS, SUMS_SQL, running_from_sums

# Rows a team's ledger is spread over (UsageLedger.stripe): a release adds to its lease's stripe,
# so concurrent releases of one team seldom wait on one row. Usage decays linearly: the stripes,
# each decayed from its own as_of, sum to the team's usage exactly.
STRIPES = 8


def ledger_stripe(lease_id: Any) -> int:
    """The ledger stripe a lease's end is added to."""
    return uuid.UUID(str(lease_id)).int % STRIPES


def half_life_s() -> float:
    return SchedulerSettings.current().fair_share_half_life_hours * 3600.0


# Running leases' GPUs per team and grant time. The leases through the state index, holding
# states only: a pending lease has no grant time (a requeue clears it) and no active link, and
# reading the queue through the index too cost a heap page per pending lease, every pass (~1,000
# pages a pass in a Kueue run's long queues; 40,000 leases a pass at 64,000 GPUs). A running lease
# (holding, not ended) holds its `gpu_count` GPUs: the grant writes that many links and only the
# end's release deactivates them (tests/allocation/test_engine_snapshot.py checks the sum against
# the links). Counting the links joined each lease to its links: on tables never analysed
# (autovacuum off), a nested loop of three index pages a lease (6,171 of 6,296 pages with 2,052
# running; 159 with statistics).
_LIVE = ", ".join(f"'{state.value}'" for state in HOLDING_STATES)
RUNNING_SQL = f"""
SELECT h.team_id, EXTRACT(EPOCH FROM h.granted_at)::float8 AS granted, sum(h.gpu_count)::int AS gpus
FROM {Lease._meta.db_table} h
WHERE h.state IN ({_LIVE}) AND h.granted_at IS NOT NULL AND h.ended_at IS NULL GROUP BY 1, 2
"""
# The ledger rows and the running usage's sums (allocation.running_usage.SUMS_SQL) as one row of
# arrays (NULL for none), times as epoch seconds: one round trip, and lists psycopg2 makes without
# a tuple a row. Where its last column is false, the running leases are read one by one.
USAGE_SQL = SUMS_SQL


def usage_by_team(arrays: Sequence[Any], t: float, h: float) -> dict[int, float]:
    """Each team's decayed usage at `t` (epoch seconds) from the arrays of USAGE_SQL: its ledger
    stripes decayed from their as_of, and what its running leases used: from the sums, or, where
    USAGE_SQL says they wait for a rebuild with a new half-life, from the running leases read one
    by one (RUNNING_SQL, one more query)."""
    teams, closed, as_of = (a or () for a in arrays[:3])
    usage: dict[int, float] = {}
    for team_id, value, at in zip(teams, closed, as_of, strict=True):
        usage[team_id] = usage.get(team_id, 0.0) + decay(value, t - at, h)
    if arrays[COLUMNS - 1]:
        for team_id, value in running_from_sums(arrays, t, h).items():
            usage[team_id] = usage.get(team_id, 0.0) + value
        return usage
    for team_id, since, n in running_rows():
        usage[team_id] = usage.get(team_id, 0.0) + interval_usage(n, since, t, t, h)
    return usage


def running_rows() -> list[tuple[int, float, int]]:
    """RUNNING_SQL's rows: the running GPUs per team and grant time, lease by lease."""
    with connection.cursor() as cur:
        cur.execute(RUNNING_SQL)
        rows: list[tuple[int, float, int]] = cur.fetchall()
    return rows


def team_views(teams: Iterable[tuple[int, str, float, str | None]], usage: dict[int, float]) -> dict[str, TeamView]:
    """TeamView by name of each (id, name, weight, parent name) team, with its usage."""
    return {name: TeamView(name=name, weight=weight, decayed_usage=usage.get(pk, 0.0), parent=parent or "")
            for pk, name, weight, parent in teams}


def team_rows() -> list[tuple[int, str, float, str | None]]:
    """Every team as `team_views` takes it: (id, name, weight, parent's name)."""
    return list(Team.objects.values_list("pk", "name", "weight", "parent__name"))


def team_usage_views(now: datetime) -> dict[str, TeamView]:
    """TeamView (weight, decayed usage, parent) for every team, by name: three queries (a fourth
    while the running usage's sums wait for a rebuild)."""
    h = half_life_s()
    teams = team_rows()
    with connection.cursor() as cur:
        cur.execute(USAGE_SQL)
        arrays = cur.fetchone()
    return team_views(teams, usage_by_team(arrays, now.timestamp(), h))


def ledger_close_many(ended: Iterable[tuple[int, int, datetime, datetime]], *,
                      leases: Iterable[tuple[int, Any]] = ()) -> None:
    """Fold ended leases into their teams' closed usage (stripe 0), given as (team_id, gpus,
    granted_at, ended_at), in order: one locking read of the teams' ledgers and one write per team
    touched. Nothing for none. `leases`: the (team_id, lease id) of those leases, whose stripes
    the lease table's trigger writes once their rows end (allocation.running_usage): held first,
    with the stripes 0, all in one order, so that two bulk ends never each hold a row the other
    waits for."""
    ended = list(ended)
    if not ended:
        return
    h = half_life_s()
    with transaction.atomic():
        stripes = {(team_id, 0) for team_id, *_ in ended} | {(team_id, ledger_stripe(pk)) for team_id, pk in leases}
        _lock_stripes(stripes, as_of=min(ended_at for *_, ended_at in ended))
        ledgers = {ledger.team_id: ledger for ledger in UsageLedger.objects.select_for_update().filter(
            team_id__in=sorted({team_id for team_id, *_ in ended}), stripe=0).order_by("team_id")}
        for team_id, gpus, granted_at, ended_at in ended:
            ledger = ledgers.get(team_id)
            if ledger is None:
                ledger, _ = UsageLedger.objects.select_for_update().get_or_create(
                    team_id=team_id, stripe=0, defaults={"as_of": ended_at})
                ledgers[team_id] = ledger
            t = max(ended_at, ledger.as_of)
            carried = decay(ledger.closed_usage, t.timestamp() - ledger.as_of.timestamp(), h)
            ledger.closed_usage = carried + interval_usage(gpus, granted_at.timestamp(),
                                                            ended_at.timestamp(), t.timestamp(), h)
            # The ended leases' grant weights (allocation.running_usage) move to the new as_of too.
            ledger.ended_weight = decay(ledger.ended_weight, t.timestamp() - ledger.as_of.timestamp(), h)
            ledger.as_of = t
        for team_id in dict.fromkeys(team_id for team_id, *_ in ended):
            ledgers[team_id].save()


def _lock_stripes(keys: set[tuple[int, int]], *, as_of: datetime) -> None:
    """Hold the ledger rows (team id, stripe) in that order, making the missing ones empty as of
    `as_of` (no later than the ends they are made for; an existing row, locked by the conflicting
    insert, is left as it was)."""
    ordered = sorted(keys)
    table = UsageLedger._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {table} AS l (team_id, stripe, closed_usage, as_of) "
                    "SELECT k.t, k.s, 0, %s FROM unnest(%s::int[], %s::int[]) WITH ORDINALITY AS k(t, s, i) "
                    "ORDER BY k.i ON CONFLICT (team_id, stripe) DO UPDATE SET stripe = l.stripe WHERE false",
                    [as_of, [t for t, _ in ordered], [stripe for _, stripe in ordered]])


def ledger_close_sql(*, team_id: int, gpus: int, granted_at: datetime, ended_at: datetime,
                     stripe: int = 0) -> tuple[str, list[Any]]:
    """`ledger_close_many` of one lease as one upsert statement (for a data-modifying CTE, see
    core.db.statements), into the team's `stripe` (`ledger_stripe` of the lease): the same
    arithmetic, done by the database on the locked ledger row, with the
    half-life read in the same statement. With t = max(ended_at, as_of):
        closed' = closed · 2^(−(t − as_of)/h) + gpus·h/ln2 · (2^(−(t − end)/h) − 2^(−(t − start)/h))
        ended_weight' = ended_weight · 2^(−(t − as_of)/h)   (allocation.running_usage)
    (the second term is 0 when end ≤ start). tests/allocation/test_sql_writes.py checks that both
    give the same ledger, tests/allocation/test_ledger_sql_property.py that it is the policy's
    arithmetic (`decay`, `interval_usage`) for any lease and ledger."""
    default_h = SchedulerSettings._meta.get_field("fair_share_half_life_hours").default
    h = (f"((SELECT COALESCE(MAX(fair_share_half_life_hours), {float(default_h)!r}) "
         f"FROM {SchedulerSettings._meta.db_table} WHERE id = 1) * 3600.0)")
    k = gpus / LN2 if ended_at > granted_at else 0.0
    start, end = granted_at.timestamp(), ended_at.timestamp()
    t = "GREATEST(%s::timestamptz, l.as_of)"
    epoch_t = f"EXTRACT(EPOCH FROM {t})::float8"

    def half_power(elapsed: str, floor: int = -1000) -> str:
        # 2^(−elapsed/h), with the exponent kept in [floor, 0]: PostgreSQL raises on underflow
        # (a ledger idle for 1,075 half-lives) where Python's pow gives 0, and 2^−1000 is 0 to any
        # ledger; above 0 only for an empty interval (end ≤ start), whose term k zeroes.
        return f"power(2, LEAST(0, GREATEST({floor}, -({elapsed}) / {h})))"

    # The carried usage: flushed below NEGLIGIBLE like `decay`, and its factor floored at 2^−600
    # so that the smallest usage kept (1e−100 · 2^−600 ≈ 1e−281) still fits a float8; a product
    # of 0 from two non-zero factors is an error in PostgreSQL.
    def carried(column: str) -> str:
        return (f"CASE WHEN abs(l.{column}) < {NEGLIGIBLE!r} THEN 0 ELSE l.{column} * "
                f"{half_power(f'EXTRACT(EPOCH FROM {t} - l.as_of)::float8', floor=-600)} END")

    sql = (f"INSERT INTO {UsageLedger._meta.db_table} AS l (team_id, stripe, closed_usage, as_of) "
           f"SELECT %s, %s, %s::float8 * {h} * (1 - {half_power('%s::float8 - %s::float8')}), %s::timestamptz "
           f"ON CONFLICT (team_id, stripe) DO UPDATE SET "
           f"closed_usage = {carried('closed_usage')} "
           f"+ %s::float8 * {h} * ({half_power(f'{epoch_t} - %s::float8')} "
           f"- {half_power(f'{epoch_t} - %s::float8')}), "
           # The ended leases' grant weights (allocation.running_usage) move to the new as_of too.
           f"ended_weight = {carried('ended_weight')}, "
           f"as_of = {t}")
    params = [team_id, stripe, k, end, start, ended_at,
              ended_at, k, ended_at, end, ended_at, start, ended_at, ended_at]
    return sql, params


def rebuild_ledger(now: datetime) -> int:
    """Recompute every team's closed usage from lease rows (the policy's `rebuild_ledger` over
    the ended leases). Returns the number of leases used."""
    rows = Lease.objects.filter(granted_at__isnull=False, ended_at__isnull=False).values_list(
        "team_id", "gpu_count", "granted_at", "ended_at")
    count = 0

    def intervals() -> Iterator[tuple[int, float, float | None, float]]:
        nonlocal count
        for team_id, gpus, granted, ended in rows.iterator():
            assert granted is not None and ended is not None  # filtered above; the stubs cannot tell
            count += 1
            yield team_id, granted.timestamp(), ended.timestamp(), gpus

    totals = fairshare.rebuild_ledger(intervals(), now.timestamp(), half_life_s())
    with transaction.atomic():
        running_usage.rebuild()  # first: it holds the ledger's writers off until this commits
        UsageLedger.objects.all().delete()
        UsageLedger.objects.bulk_create(
            [UsageLedger(team_id=tid, closed_usage=v, as_of=now) for tid, v in totals.items()])
    return count
