"""Allocated but idle: flag leased GPUs whose utilisation has stayed below a threshold for a
while, and meter the GPU-hours they sit so (issue 26: "the number a GPU platform team is judged by").

A GPU is judged by its lease's idle reclaim rule (`allocation.policy.idle.rule_for`: its priority
class's, else its pool's) where there is one, else by `GPUPOOL["IDLE_BELOW_UTIL_PCT"]` and
`GPUPOOL["IDLE_FOR_S"]`; only the threshold and the time count here: flagging ends nothing (idle
reclaim does that, under its own rule). The rules of an idle run are those of idle reclaim
(`allocation.policy.idle`: a sample without a reading or at the threshold breaks it, so do a gap
and a stale newest sample); the run is carried on each link (`LeaseGpu.idle_since`,
`idle_seen_at`) from check to check (`idle_run_advance`), so a check reads each sample once: about
one sample per leased GPU per check, a few tens of milliseconds at 16,000 GPUs.

Each check, for every active link of a granted or bound lease: the run carried on, the flag set
or cleared (`idle_flagged_at`), and the time a flagged GPU sat idle since the last check (or since
it was flagged) added to the lease's `IdleUsage` row of each UTC hour it spans, weighted as the
meter weighs the GPU. Readers (`allocation.selectors.idle`) read the flag; the usage report the
rows. One check at a time (an advisory lock, tried: a second check returns at once), so no
interval is metered twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from allocation.choices import HOLDING_STATES
from allocation.models import IdleUsage, LeaseGpu
from allocation.policy.idle import IdleReclaim, IdleRun, idle_run_advance, idle_run_flagged_at, rule_for
from allocation.policy.metering import gpu_equivalent
from allocation.services.idle import idle_rules, max_gap_s
from core.db import IDLE_LOCKS
from core.db.bulk import bulk_update_columns
from inventory.models import GpuSample

_LINK_FIELDS = ("pk", "lease_id", "gpu_id", "idle_since", "idle_seen_at", "idle_metered_until",
                "lease__team_id", "lease__pool_id", "lease__priority_class_id", "lease__granted_at",
                "gpu__foreign", "gpu__model", "gpu__mig_profile", "gpu__shared_replicas")
_STATE_FIELDS = ["idle_since", "idle_seen_at", "idle_flagged_at", "idle_metered_until"]


def default_rule() -> IdleReclaim:
    """The threshold and idle time of a lease under no idle reclaim rule (warn_s is not used)."""
    gp = settings.GPUPOOL
    return IdleReclaim(below_util_pct=float(gp["IDLE_BELOW_UTIL_PCT"]), for_s=float(gp["IDLE_FOR_S"]), warn_s=0.0)


@dataclass(frozen=True)
class IdleCheck:
    links: int = 0  # active links of holding leases judged
    flagged: int = 0  # of them flagged idle now
    metered_gpu_s: float = 0.0  # idle GPU-seconds added to the meter by this check


def _ts(at: datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def _dt(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, UTC) if t is not None else None


def _hours(start: float, end: float) -> list[tuple[datetime, float]]:
    """[start, end) cut at UTC hour boundaries: (hour, seconds in it)."""
    out = []
    while start < end:
        hour = datetime.fromtimestamp(start, UTC).replace(minute=0, second=0, microsecond=0)
        cut = min(end, (hour + timedelta(hours=1)).timestamp())
        out.append((hour, cut - start))
        start = cut
    return out


def _samples(links: list[dict[str, Any]], floors: dict[int, float]) -> dict[int, list[tuple[float, float | None]]]:
    """GPU id → its samples after its link's floor: one query from the lowest floor."""
    if not links:
        return {}
    lowest = _dt(min(floors.values()))
    by_gpu: dict[int, list[tuple[float, float | None]]] = defaultdict(list)
    for gpu_id, at, util in (GpuSample.objects.filter(gpu_id__in=[link["gpu_id"] for link in links], at__gt=lowest)
                             .order_by().values_list("gpu_id", "at", "utilization_pct")):
        by_gpu[gpu_id].append((at.timestamp(), util))
    return by_gpu


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
        links = list(LeaseGpu.objects.filter(active=True, lease__state__in=HOLDING_STATES,
                                             lease__granted_at__isnull=False).order_by().values(*_LINK_FIELDS))
        pools, classes = idle_rules()
        fallback, gap = default_rule(), max_gap_s()
        rules, runs, floors = {}, {}, {}
        for link in links:
            rule = (rule_for(classes.get(link["lease__priority_class_id"]), pools.get(link["lease__pool_id"]))
                    or fallback)
            # Samples since the last one folded in; a link seen too long ago (no check for a
            # while), or never, starts over from the samples that can still decide its flag:
            # a run of `for_s` is told by those of the last `for_s` plus one gap.
            window = max(link["lease__granted_at"].timestamp(), at - rule.for_s - gap)
            seen = _ts(link["idle_seen_at"])
            run = IdleRun(_ts(link["idle_since"]), seen) if seen is not None and seen >= window else IdleRun()
            rules[link["pk"]], runs[link["pk"]] = rule, run
            floors[link["pk"]] = run.seen_at if run.seen_at is not None else window - 1e-6
        samples = _samples(links, floors)
        return _judge_and_meter(links, rules, runs, floors, samples, at, gap)


def _judge_and_meter(links: list[dict[str, Any]], rules: dict[int, IdleReclaim], runs: dict[int, IdleRun],
                     floors: dict[int, float], samples: dict[int, list[tuple[float, float | None]]],
                     at: float, gap: float) -> IdleCheck:
    columns: list[list[Any]] = [[] for _ in _STATE_FIELDS]
    idle: dict[tuple[Any, datetime], list[Any]] = {}
    flagged_count, metered = 0, 0.0
    for link in links:
        rule = rules[link["pk"]]
        mine = [s for s in samples.get(link["gpu_id"], ()) if s[0] > floors[link["pk"]]]
        # A GPU a process outside gpupool uses is busy, whatever its utilisation.
        run = IdleRun() if link["gpu__foreign"] else idle_run_advance(runs[link["pk"]], mine, rule.below_util_pct,
                                                                       max_gap_s=gap)
        flagged = idle_run_flagged_at(run, for_s=rule.for_s, now=at, max_gap_s=gap)
        if flagged is not None:
            flagged_count += 1
            start = max(flagged, _ts(link["idle_metered_until"]) or flagged, link["lease__granted_at"].timestamp())
            weight = gpu_equivalent(link["gpu__model"], link["gpu__mig_profile"], link["gpu__shared_replicas"])
            for hour, seconds in _hours(start, at):
                row = idle.setdefault((link["lease_id"], hour), [link["lease__team_id"], link["lease__pool_id"],
                                                                 link["gpu__model"], 0.0])
                row[3] += seconds * weight
                metered += seconds * weight
        for column, value in zip(columns, (run.since, run.seen_at, flagged, at), strict=True):
            column.append(_dt(value))
    bulk_update_columns(LeaseGpu, [link["pk"] for link in links], _STATE_FIELDS, columns)
    _meter_add(idle)
    return IdleCheck(links=len(links), flagged=flagged_count, metered_gpu_s=metered)


def _meter_add(rows: dict[tuple[Any, datetime], list[Any]]) -> None:
    """Add GPU-seconds to the (lease, hour) rows, creating them: one statement."""
    if not rows:
        return
    table = IdleUsage._meta.db_table
    keys, values = list(rows), list(rows.values())
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {table} (lease_id, hour, team_id, pool_id, model, gpu_seconds) "
            "SELECT * FROM unnest(%s::uuid[], %s::timestamptz[], %s::bigint[], %s::bigint[], %s::varchar[], "
            "%s::float8[]) ON CONFLICT (lease_id, hour) DO UPDATE "
            f"SET gpu_seconds = {table}.gpu_seconds + EXCLUDED.gpu_seconds",
            [[str(k[0]) for k in keys], [k[1] for k in keys], [v[0] for v in values], [v[1] for v in values],
             [v[2] for v in values], [v[3] for v in values]])
