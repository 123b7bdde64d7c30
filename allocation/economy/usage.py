"""Reads of the GPU-hour meter (allocation.models.usage.LeaseUsage): the chargeback report and the
budgets' usage, as SQL arithmetic over grant intervals clipped to a window.

A meter row covers [started_at, end) where end is its own `ended_at`, else its lease's
`ended_at` (a safety net: every end of a lease closes its row), else now (the lease holds its
GPUs). Its GPU-hours within a window [since, until) are gpu_equiv × the overlap.

Beside them, the idle GPU-hours: the hours leased GPUs sat allocated but idle
(allocation.models.usage.IdleUsage, one row per team, pool, user, model and UTC hour), a row's
share of a window being its hour's share in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from allocation.models import IdleUsage, Lease, LeaseUsage, Price, Team
from allocation.policy.metering import price_for
from inventory.models import Pool

# "department": the teams' rows summed under their top-level department (usage_tree.py; the
# report's callers regroup, usage_report itself never sees it).
GROUP_BY = ("team", "pool", "model", "user", "day", "department")
MAX_DAYS = 400  # a `group_by=day` report covers at most this many days (one bucket each)


_KEYS = {"team": "t.name", "pool": "p.name", "model": "u.model", "user": "usr.{username}", "day": "b.n",
         "team_id": "u.team_id", "pool_id": "u.pool_id"}


def _scope_sql(team_ids: Sequence[int] | None, pool_id: int | None) -> tuple[str, list[Any]]:
    """The WHERE clause (empty: none) and its parameters for rows `u` of `team_ids` (None: all)
    in `pool_id` (None: all)."""
    where: list[str] = []
    params: list[Any] = []
    if team_ids is not None:
        where.append(f"u.team_id IN ({', '.join(['%s'] * len(team_ids))})" if team_ids else "1 = 0")
        params += list(team_ids)
    if pool_id is not None:
        where.append("u.pool_id = %s")
        params.append(pool_id)
    return (f"WHERE {' AND '.join(where)} " if where else ""), params


def _joins(table: str, *, lease: bool = True) -> str:
    """The name tables joined to rows `u` of `table`; the user through the lease (`lease`), else
    the row's own user."""
    user_model = get_user_model()
    via = f"JOIN {Lease._meta.db_table} l ON l.id = u.lease_id " if lease else ""
    return (f"FROM {table} u {via}"
            f"JOIN {Team._meta.db_table} t ON t.id = u.team_id JOIN {Pool._meta.db_table} p ON p.id = u.pool_id "
            f"JOIN {user_model._meta.db_table} usr ON usr.id = {'l' if lease else 'u'}.user_id ")


def _columns(keys: Sequence[str]) -> list[str]:
    return [_KEYS[k].format(username=get_user_model().USERNAME_FIELD) for k in keys]


def _buckets_sql(buckets: Sequence[tuple[datetime, datetime]]) -> tuple[str, list[Any]]:
    values = ", ".join(f"({i}, %s::timestamptz, %s::timestamptz)" for i in range(len(buckets)))
    return f"WITH b(n, b0, b1) AS (VALUES {values}) ", [p for b0, b1 in buckets for p in (b0, b1)]


def _aggregate(buckets: Sequence[tuple[datetime, datetime]], keys: Sequence[str], *, now: datetime,
               team_ids: Sequence[int] | None, pool_id: int | None) -> list[tuple[Any, ...]]:
    """(key values…, GPU-seconds, GPU-equivalents held now) per distinct key within each bucket
    [b0, b1), over meter rows of `team_ids` (None: all) and `pool_id` (None: all). One query."""
    end = "COALESCE(u.ended_at, l.ended_at, %s::timestamptz)"
    clipped = f"EXTRACT(EPOCH FROM LEAST({end}, b.b1) - GREATEST(u.started_at, b.b0))::float8"
    cols = _columns(keys)
    with_b, params = _buckets_sql(buckets)
    held = "SUM(CASE WHEN u.ended_at IS NULL AND l.ended_at IS NULL THEN u.gpu_equiv ELSE 0 END)"
    params += [now, now]
    where, scope = _scope_sql(team_ids, pool_id)
    sql = (f"{with_b}SELECT {', '.join([*cols, ''])}SUM(u.gpu_equiv * {clipped}), {held} "
           + _joins(LeaseUsage._meta.db_table) + f"JOIN b ON u.started_at < b.b1 AND {end} > b.b0 " + where
           + (f"GROUP BY {', '.join(cols)}" if cols else ""))
    with connection.cursor() as cur:
        cur.execute(sql, params + scope)  # placeholders: the buckets, `now` of the overlap and of the join, filters
        return [tuple(row) for row in cur.fetchall()]


def _idle_aggregate(buckets: Sequence[tuple[datetime, datetime]], keys: Sequence[str], *,
                    team_ids: Sequence[int] | None, pool_id: int | None) -> list[tuple[Any, ...]]:
    """(key values…, idle GPU-seconds) per distinct key within each bucket, over the idle rows
    of `team_ids` and `pool_id`: a row counts its hour's share that lies in the bucket. One query."""
    hour_end = "u.hour + interval '1 hour'"
    share = f"EXTRACT(EPOCH FROM LEAST({hour_end}, b.b1) - GREATEST(u.hour, b.b0))::float8 / 3600.0"
    cols = _columns(keys)
    with_b, params = _buckets_sql(buckets)
    where, scope = _scope_sql(team_ids, pool_id)
    sql = (f"{with_b}SELECT {', '.join([*cols, ''])}SUM(u.gpu_seconds * {share}) "
           + _joins(IdleUsage._meta.db_table, lease=False) + f"JOIN b ON u.hour < b.b1 AND {hour_end} > b.b0 "
           + where
           + (f"GROUP BY {', '.join(cols)}" if cols else ""))
    with connection.cursor() as cur:
        cur.execute(sql, params + scope)
        return [tuple(row) for row in cur.fetchall()]


@dataclass(frozen=True)
class UsageRow:
    """One group of the report: its key (a team, pool, model, user name, or a day as
    YYYY-MM-DD), GPU-hours, and with prices set, the cost of the priced models and the GPU-hours
    of models no price names."""

    key: str
    gpu_hours: float
    cost: float | None = None
    unpriced_gpu_hours: float | None = None
    idle_gpu_hours: float = 0.0  # of gpu_hours, those its GPUs sat allocated but idle


@dataclass(frozen=True)
class UsageReport:
    since: datetime
    until: datetime
    group_by: str
    rows: tuple[UsageRow, ...]
    priced: bool  # some price is configured: rows carry cost

    @property
    def total_gpu_hours(self) -> float:
        return sum(r.gpu_hours for r in self.rows)

    @property
    def total_idle_gpu_hours(self) -> float:
        return sum(r.idle_gpu_hours for r in self.rows)

    @property
    def total_cost(self) -> float | None:
        return sum(r.cost or 0.0 for r in self.rows) if self.priced else None


def day_buckets(since: datetime, until: datetime) -> list[tuple[datetime, datetime]]:
    """The UTC days [since, until) touches, each clipped to the window."""
    out = []
    day = since.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    while day < until:
        out.append((max(day, since), min(day + timedelta(days=1), until)))
        day += timedelta(days=1)
    return out


def price_list() -> dict[str, float]:
    return dict(Price.objects.values_list("model", "per_gpu_hour"))


def usage_report(*, since: datetime, until: datetime, group_by: str, team_ids: Sequence[int] | None = None,
                 pool_id: int | None = None, now: datetime) -> UsageReport:
    """GPU-hours (and cost, when prices are set) over [since, until) per `group_by` (one of
    GROUP_BY), of the teams `team_ids` (None: all) in pool `pool_id` (None: all), with the idle
    GPU-hours among them, in three queries. Rows are sorted by key; groups without usage are left
    out. `now` ends the running leases."""
    buckets = day_buckets(since, until) if group_by == "day" else [(since, until)]
    keys = [group_by] if group_by == "model" else [group_by, "model"]
    prices = price_list()

    def name_of(key: list[Any], model: Any) -> str:
        return buckets[int(key[0])][0].date().isoformat() if group_by == "day" else str(key[0] if key else model)

    groups: dict[str, list[float]] = {}
    for *key, model, seconds, _ in (_aggregate(buckets, keys, now=now, team_ids=team_ids, pool_id=pool_id)
                                    if buckets else []):
        hours = float(seconds or 0.0) / 3600.0
        price = price_for(model, prices)
        acc = groups.setdefault(name_of(key, model), [0.0, 0.0, 0.0, 0.0])
        acc[0] += hours
        if price is None:
            acc[2] += hours
        else:
            acc[1] += hours * price
    for *key, model, seconds in (_idle_aggregate(buckets, keys, team_ids=team_ids, pool_id=pool_id)
                                 if buckets else []):
        groups.setdefault(name_of(key, model), [0.0, 0.0, 0.0, 0.0])[3] += float(seconds or 0.0) / 3600.0
    rows = tuple(UsageRow(name, round(h, 6), round(c, 6) if prices else None, round(u, 6) if prices else None,
                          round(min(i, h), 6))
                 for name, (h, c, u, i) in sorted(groups.items()) if h > 0)
    return UsageReport(since, until, group_by, rows, bool(prices))


def usage_by_team_and_pool(since: datetime, team_ids: Sequence[int], *, now: datetime,
                           ) -> Mapping[tuple[int, int], tuple[float, float]]:
    """(team id, pool id) → (GPU-hours over [since, now), GPU-equivalents held now), for the
    budgets' standing: one query."""
    rows = _aggregate([(since, now)], ["team_id", "pool_id"], now=now, team_ids=team_ids, pool_id=None)
    return {(team, pool): (float(seconds or 0.0) / 3600.0, float(held or 0.0))
            for team, pool, seconds, held in rows}


def usage_by_team_and_day(*, since: datetime, until: datetime, team_ids: Sequence[int] | None = None,
                          pool_id: int | None = None, now: datetime,
                          ) -> tuple[list[str], dict[str, list[float]]]:
    """The UTC days of [since, until) (YYYY-MM-DD) and each team's GPU-hours on each of them (teams
    without usage left out), for the dashboard's chart: one query. The window must be at most
    MAX_DAYS long (ValueError)."""
    buckets = day_buckets(since, until)
    if len(buckets) > MAX_DAYS:
        raise ValueError(f"at most {MAX_DAYS} days")
    days = [b0.date().isoformat() for b0, _ in buckets]
    series: dict[str, list[float]] = {}
    for index, team, seconds, _ in (_aggregate(buckets, ["day", "team"], now=now, team_ids=team_ids,
                                               pool_id=pool_id) if buckets else []):
        series.setdefault(team, [0.0] * len(days))[int(index)] = round(float(seconds or 0.0) / 3600.0, 4)
    return days, dict(sorted(series.items()))
