"""What a pass reads besides its pool's GPUs and leases: one statement while nobody reconfigures.

Teams, priority classes, the scheduler settings, quotas and reservations change when an admin or
the configuration changes them, yet a pass needs them all every time: seven small queries a pass
(of ~28 statements), each a round trip that waits for a core on a busy machine. A trigger on each
of those tables (migration allocation 0024) stamps `allocation_configversion` with a new number at
every write, in the writer's transaction, so a reader sees a number only once what it stamps is
committed. A pass reads that number together with what changes at every grant and end (the
fair-share ledger, the GPUs each team runs) and its pool's own scheduler row (its last fair-share
preemption is the pass's own write) in one statement (`CONTEXT_SQL`), and reads the rest again only
when the number differs from the one this process last read them at. The rest is read after its
number, so it is never older than the number it is kept under: at worst newer, and read again.
It is kept for the database session that read it: after a failover (Patroni) that lost the last
commits of the old primary, the new one may give out a number again, for other data; a new session
(every reconnection) reads the configuration again.

A team made after the number was read may be named by a lease the pass reads later: the pass's
`Names` then misses it, and the pass reads the context again (`PassContext.reloaded`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection

from allocation.engine.lease_reads import CLASS_SQL, Names
from allocation.engine.lease_reads import read as _read
from allocation.ledger import USAGE_SQL, team_rows, team_views, usage_by_team
from allocation.models import Reservation, SchedulerSettings
from allocation.policy.types import PoolView, QuotaView, ReservationView, TeamView
from allocation.running_usage import COLUMNS
from inventory.models import Pool

CONTEXT_SQL = f"""
SELECT (SELECT v.version FROM allocation_configversion v WHERE v.id = 1), u.*,
       ps.fair_share_preemption, ps.fair_share_preemption_interval_s,
       EXTRACT(EPOCH FROM ps.last_fair_share_preemption_at)::float8, pg_backend_pid()
FROM ({USAGE_SQL}) u LEFT JOIN allocation_poolscheduling ps ON ps.pool_id = %(pool)s
"""
_USAGE = slice(1, 1 + COLUMNS)  # CONTEXT_SQL's columns from USAGE_SQL
_POOL = slice(1 + COLUMNS, 4 + COLUMNS)  # the pool's scheduler row
_PID = 4 + COLUMNS

QUOTA_SQL = """
SELECT t.name, q.guaranteed, q."limit", q.lending_limit
FROM allocation_quota q JOIN allocation_team t ON t.id = q.team_id
WHERE q.pool_id = %(pool)s ORDER BY t.name
"""


@dataclass(frozen=True)
class _PoolConfig:
    quotas: tuple[tuple[str, int, int | None, int | None], ...]
    reservations: tuple[ReservationView, ...]  # active ones, ended or not (filtered at each pass)


@dataclass
class _Config:
    """The configuration as read at `version`: (number, database session), None when the table was
    never stamped (then it is never kept)."""

    version: tuple[int, int] | None
    teams: tuple[tuple[int, str, float, str | None], ...]  # id, name, weight, parent's name
    classes: dict[int, tuple[str, int, bool, int, int]]
    settings: SchedulerSettings
    pools: dict[int, _PoolConfig] = field(default_factory=dict)


_CACHE: _Config | None = None
_LOCK = threading.Lock()


def forget() -> None:
    """Drop the configuration kept (the next pass reads it, as a new process would)."""
    global _CACHE
    with _LOCK:
        _CACHE = None


def _read_config(version: tuple[int, int] | None) -> _Config:
    teams = tuple(team_rows())
    classes = {row[0]: row[1:] for row in _read(CLASS_SQL, {})}
    return _Config(version, teams, classes, SchedulerSettings.current())


def _read_pool_config(pool: Pool) -> _PoolConfig:
    quotas = tuple(_read(QUOTA_SQL, {"pool": pool.pk}))
    rows = (Reservation.objects.filter(pool_id=pool.pk, state="active").order_by("start", "pk")
            .values_list("pk", "team__name", "gpus", "start", "end", "model"))
    return _PoolConfig(quotas, tuple(ReservationView(str(pk), team, pool.name, gpus, start.timestamp(),
                                                     end.timestamp(), model)
                                     for pk, team, gpus, start, end, model in rows))


def _config(version: tuple[int, int] | None, pool: Pool, *, fresh: bool = False) -> tuple[_Config, _PoolConfig]:
    """The configuration at `version` (and the pool's part): kept, or read and kept."""
    global _CACHE
    with _LOCK:
        config = _CACHE
    if fresh or config is None or version is None or config.version != version:
        config = _read_config(version)
        if version is not None:
            with _LOCK:
                _CACHE = config
    with _LOCK:
        own = config.pools.get(pool.pk)
    if own is None or fresh:
        own = _read_pool_config(pool)
        with _LOCK:
            config.pools[pool.pk] = own
    return config, own


@dataclass(frozen=True)
class PassContext:
    """The pass's teams (with usage), names, quotas, reservations and scheduler settings."""

    pool: Pool
    now: datetime
    row: tuple[Any, ...]  # CONTEXT_SQL's
    config: _Config
    own: _PoolConfig

    @property
    def settings(self) -> SchedulerSettings:
        return self.config.settings

    @property
    def half_life_s(self) -> float:
        return self.config.settings.fair_share_half_life_hours * 3600.0

    def names(self) -> Names:
        return Names({pk: name for pk, name, *_ in self.config.teams}, self.config.classes)

    def reloaded(self) -> PassContext:
        """The context with the configuration read again (a team or class newer than its number)."""
        config, own = _config(None, self.pool, fresh=True)
        return PassContext(self.pool, self.now, self.row, config, own)

    def teams(self) -> dict[str, TeamView]:
        return team_views(self.config.teams, usage_by_team(self.row[_USAGE], self.now.timestamp(), self.half_life_s))

    def quotas(self) -> dict[tuple[str, str], QuotaView]:
        name = self.pool.name
        return {(team, name): QuotaView(team, name, guaranteed, limit, lending)
                for team, guaranteed, limit, lending in self.own.quotas}

    def reservations(self) -> tuple[ReservationView, ...]:
        """The pool's active reservations that have not ended (those not begun yet too)."""
        t = self.now.timestamp()
        return tuple(r for r in self.own.reservations if r.end > t)

    def pool_view(self) -> PoolView:
        """The pool's scheduling settings as the policy reads them: its own (`pools[].scheduler`)
        where it sets them, else the scheduler section's; and its last fair-share preemption."""
        on, interval, last = self.row[_POOL]
        sched = self.settings
        return PoolView(
            self.pool.name,
            share_across_teams=self.pool.share_across_teams,
            fair_share_preemption=sched.fair_share_preemption if on is None else on,
            fair_share_preemption_interval_s=sched.fair_share_preemption_interval_s if interval is None else interval,
            last_fair_share_preemption=last)


def read_context(pool: Pool, now: datetime) -> PassContext:
    """The pass's context: one statement, and the configuration again where it changed."""
    with connection.cursor() as cur:
        cur.execute(CONTEXT_SQL, {"pool": pool.pk})
        row = cur.fetchone()
    config, own = _config(None if row[0] is None else (row[0], row[_PID]), pool)
    return PassContext(pool, now, row, config, own)
