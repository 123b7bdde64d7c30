"""Allocated but idle: flag leased GPUs whose utilisation has stayed below a threshold for a
while, and meter the GPU-hours they sit so (issue 26: "the number a GPU platform team is judged by").

A GPU is judged by its lease's idle reclaim rule (`allocation.policy.idle.rule_for`: its priority
class's, else its pool's) where there is one, else by `GPUPOOL["IDLE_BELOW_UTIL_PCT"]` and
`GPUPOOL["IDLE_FOR_S"]`; only the threshold and the time count here: flagging ends nothing (idle
reclaim does that, under its own rule). The rules of an idle run are those of idle reclaim
(`allocation.policy.idle`: a sample without a reading or at the threshold breaks it, so do a gap
and a stale newest sample); the run is carried on each link (`LeaseGpu.idle_since`,
`idle_seen_at`) from check to check (`idle_run_advance`), so a check reads each sample once: about
one sample per leased GPU per check. At 16,000 leased GPUs a check takes 0.7 s (bench/bench_idle_gpus.py,
a shared 2-core machine), half of it writing the links' state; a first check, which reads each
GPU's samples of the idle time, 3.6 s.

Each check, for every active link of a granted or bound lease: the run carried on, the flag set
or cleared (`idle_flagged_at`), and the time a flagged GPU sat idle since the last check (or since
it was flagged) added to the `IdleUsage` row of each UTC hour it spans (the lease's team, pool,
user and model), weighted as the meter weighs the GPU. Readers (`allocation.selectors.idle`) read
the flag; the usage report the rows. One check at a time (an advisory lock, tried: a second check
returns at once), so no interval is metered twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from allocation.choices import HOLDING_STATES
from allocation.models import IdleUsage, Lease, LeaseGpu
from allocation.policy.idle import IdleReclaim, IdleRun, idle_run_advance, idle_run_flagged_at, rule_for
from allocation.policy.metering import gpu_equivalent
from allocation.services.idle import idle_rules, max_gap_s
from core.db import IDLE_LOCKS
from inventory.models import Gpu, GpuSample

_STATE = ("idle_since", "idle_seen_at", "idle_flagged_at", "idle_metered_until")


def default_rule() -> IdleReclaim:
    """The threshold and idle time of a lease under no idle reclaim rule (warn_s is not used)."""
    gp = settings.GPUPOOL
    return IdleReclaim(below_util_pct=float(gp["IDLE_BELOW_UTIL_PCT"]), for_s=float(gp["IDLE_FOR_S"]), warn_s=0.0)


@dataclass(frozen=True)
class IdleCheck:
    links: int = 0  # active links of holding leases judged
    flagged: int = 0  # of them flagged idle now
    metered_gpu_s: float = 0.0  # idle GPU-seconds added to the meter by this check


def _links() -> list[tuple[Any, ...]]:
    """Every active link of a granted or bound lease: (id, lease id, GPU id, its idle state as
    epoch seconds, the lease's team, pool, priority class and grant, the GPU's foreign flag,
    model, MIG profile and replicas). Times as floats from the database: a datetime per value
    would cost more than the check's own work at 16,000 GPUs."""
    links, leases, gpus = LeaseGpu._meta.db_table, Lease._meta.db_table, Gpu._meta.db_table
    epochs = ", ".join(f"EXTRACT(EPOCH FROM k.{column})::float8" for column in _STATE)
    with connection.cursor() as cur:
        cur.execute(f"SELECT k.id, k.lease_id, k.gpu_id, {epochs}, l.team_id, l.pool_id, l.priority_class_id, "
                    "EXTRACT(EPOCH FROM l.granted_at)::float8, l.user_id, "
                    "g.foreign, g.model, g.mig_profile, g.shared_replicas "
                    f"FROM {links} k JOIN {leases} l ON l.id = k.lease_id JOIN {gpus} g ON g.id = k.gpu_id "
                    "WHERE k.active AND l.state = ANY(%s) AND l.granted_at IS NOT NULL",
                    [[str(state) for state in HOLDING_STATES]])
        rows: list[tuple[Any, ...]] = cur.fetchall()
    return rows


def _samples(lowest: float) -> dict[int, list[tuple[float, float | None]]]:
    """GPU id → its samples after `lowest` (epoch seconds), for the GPUs of active links: one query."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT s.gpu_id, EXTRACT(EPOCH FROM s.at)::float8, s.utilization_pct "
                    f"FROM {GpuSample._meta.db_table} s WHERE s.at > to_timestamp(%s) AND s.gpu_id IN "
                    f"(SELECT k.gpu_id FROM {LeaseGpu._meta.db_table} k WHERE k.active)", [lowest])
        by_gpu: dict[int, list[tuple[float, float | None]]] = defaultdict(list)
        for gpu_id, at, util in cur.fetchall():
            by_gpu[gpu_id].append((at, util))
    return by_gpu


def _array(values: list[Any]) -> str:
    """A PostgreSQL array literal of numbers and NULLs: one text parameter, parsed in one go."""
    return "{" + ",".join("NULL" if v is None else repr(v) for v in values) + "}"


def _hours(start: float, end: float) -> list[tuple[datetime, float]]:
    """[start, end) cut at UTC hour boundaries: (hour, seconds in it)."""
    out = []
    while start < end:
        hour = datetime.fromtimestamp(start, UTC).replace(minute=0, second=0, microsecond=0)
        cut = min(end, (hour + timedelta(hours=1)).timestamp())
        out.append((hour, cut - start))
        start = cut
    return out


def gpus_idle_check(*, now: datetime | None = None) -> IdleCheck:
    """One check (module docstring). `now` defaults to the database's clock, which stamped the
    samples. Returns what it judged, flagged and metered; IdleCheck() when another check runs."""
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_xact_lock(%s), clock_timestamp()", [IDLE_LOCKS << 48])
            locked, clock = cur.fetchone()
        if not locked:
            return IdleCheck()
        at = (now or clock).timestamp()
        links = _links()
        if not links:
            return IdleCheck()
        pools, classes = idle_rules()
        fallback, gap = default_rule(), max_gap_s()
        judged = []
        for pk, _, gpu_id, since, seen, _, metered, team, pool, klass, granted, user, foreign, *gpu in links:
            rule = rule_for(classes.get(klass), pools.get(pool)) or fallback
            # Samples since the last one folded in; a link seen too long ago (no check for a
            # while), or never, starts over from the samples that can still decide its flag:
            # a run of `for_s` is told by those of the last `for_s` plus one gap.
            window = max(granted, at - rule.for_s - gap)
            run = IdleRun(since, seen) if seen is not None and seen >= window else IdleRun()
            floor = run.seen_at if run.seen_at is not None else window - 1e-6
            judged.append(_Link(pk, gpu_id, (team, pool, user, str(gpu[0])), granted, metered, foreign,
                                gpu_equivalent(*gpu), rule, run, floor))
        samples = _samples(min(link.floor for link in judged))
        return _judge_and_meter(judged, samples, at, gap)


@dataclass(frozen=True)
class _Link:
    pk: int
    gpu_id: int
    group: tuple[int, int, int, str]  # the lease's team, pool and user, the GPU's model: its idle row
    granted: float
    metered_until: float | None
    foreign: bool
    weight: float  # what the GPU counts as on the GPU-hour meter
    rule: IdleReclaim
    run: IdleRun
    floor: float  # samples after this one are new to it


def _judge_and_meter(links: list[_Link], samples: dict[int, list[tuple[float, float | None]]], at: float,
                     gap: float) -> IdleCheck:
    state: list[list[Any]] = [[], [], [], [], []]
    idle: dict[tuple[int, int, int, str, datetime], float] = defaultdict(float)
    flagged_count, metered = 0, 0.0
    for link in links:
        rule = link.rule
        mine = [s for s in samples.get(link.gpu_id, ()) if s[0] > link.floor]
        # A GPU a process outside gpupool uses is busy, whatever its utilisation.
        run = IdleRun() if link.foreign else idle_run_advance(link.run, mine, rule.below_util_pct, max_gap_s=gap)
        flagged = idle_run_flagged_at(run, for_s=rule.for_s, now=at, max_gap_s=gap)
        if flagged is not None:
            flagged_count += 1
            start = max(flagged, link.metered_until or flagged, link.granted)
            for hour, seconds in _hours(start, at):
                idle[(*link.group, hour)] += seconds * link.weight
                metered += seconds * link.weight
        for column, value in zip(state, (link.pk, run.since, run.seen_at, flagged, at), strict=True):
            column.append(value)
    _meter_add(idle)
    table = LeaseGpu._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"UPDATE {table} k SET idle_since = to_timestamp(v.since), idle_seen_at = to_timestamp(v.seen), "
                    "idle_flagged_at = to_timestamp(v.flagged), idle_metered_until = to_timestamp(v.metered) "
                    "FROM unnest(%s::bigint[], %s::float8[], %s::float8[], %s::float8[], %s::float8[]) "
                    "AS v(id, since, seen, flagged, metered) WHERE k.id = v.id", [_array(c) for c in state])
    return IdleCheck(links=len(links), flagged=flagged_count, metered_gpu_s=metered)


def _meter_add(rows: dict[tuple[int, int, int, str, datetime], float]) -> None:
    """Add GPU-seconds to the (team, pool, user, model, hour) rows, creating them: one statement."""
    if not rows:
        return
    table = IdleUsage._meta.db_table
    keys = list(rows)
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {table} (team_id, pool_id, user_id, model, hour, gpu_seconds) "
            "SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::varchar[], %s::timestamptz[], "
            "%s::float8[]) ON CONFLICT (team_id, pool_id, user_id, model, hour) DO UPDATE "
            f"SET gpu_seconds = {table}.gpu_seconds + EXCLUDED.gpu_seconds",
            [*([k[i] for k in keys] for i in range(5)), list(rows.values())])
