"""The beat leader's hold on PostgreSQL: a session-level advisory lock on a connection of its own,
and the claims of periodic runs, made on that same connection.

Why a session lock: it lives exactly as long as the session that took it. A beat that dies (kill -9,
the OOM killer, its pod deleted) closes its socket, PostgreSQL ends the session at once, and the
lock is free for a standby's next try. A beat that is frozen or cut off, or whose node is gone,
stops talking: the server ends its session after `lease_s` of silence (`idle_session_timeout`,
PostgreSQL 14+; the server's TCP keepalives and `tcp_user_timeout` too, for a peer that vanished
without a word), and the lock with it. The leader says something at least every second (core.beat),
so a live leader is never taken for a dead one.

Why a connection of its own: Django closes and reopens its connections (CONN_MAX_AGE, health
checks after errors), and each close would drop the lock without anyone deciding to.

Why claims on that same connection: a claim that succeeds proves the session, and so the lock,
was alive when the run was claimed; one that fails (a dropped connection) is a lost lead, and
nothing is sent. The claim is also a conditional UPDATE (the last run as this beat read it → the
new run), so even two beats that both believe they lead never send the same run twice.

Needs a real session: not through a pooler in transaction mode (PgBouncer `pool_mode=transaction`),
where the next statement may run on another server connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connections

from core.db import BEAT_LOCKS

logger = logging.getLogger("gpupool.beat")

#: The advisory lock every beat of one database contends for.
LOCK_KEY = (BEAT_LOCKS << 48) | 1
_KEY_HIGH, _KEY_LOW = LOCK_KEY >> 32, LOCK_KEY & 0xFFFFFFFF
#: A connection attempt to a server that does not answer gives up after this (libpq, per host).
CONNECT_TIMEOUT_S = 5
TABLE = "core_beat_entry"

_HOLDS = f"""SELECT clock_timestamp(), EXISTS (
    SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
    AND classid::bigint = {_KEY_HIGH} AND objid::bigint = {_KEY_LOW} AND objsubid = 1)"""
_HOLDER = f"""SELECT a.application_name, a.client_addr::text, l.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
    WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = {_KEY_HIGH}
    AND l.objid::bigint = {_KEY_LOW} AND l.objsubid = 1 AND l.database = (
        SELECT oid FROM pg_database WHERE datname = current_database())"""


class LockLost(Exception):
    """The lock's session is gone (the database did not answer): this beat no longer leads."""


class BeatLock:
    """One beat's claim to lead: `hold()` every tick, `claim()` before each send, `release()` at exit."""

    def __init__(self, *, lease_s: float, alias: str = DEFAULT_DB_ALIAS) -> None:
        self.lease_s = lease_s
        self.alias = alias
        self.name = f"gpupool beat {socket.gethostname()}:{os.getpid()}"
        self._conn: Any = None
        self._held_before = False  # this session took the lock: confirm it, do not take it again

    @property
    def _errors(self) -> type[Exception]:
        """The driver's base error (psycopg2's or psycopg's, as Django's backend uses)."""
        wrapper: Any = connections[self.alias]
        return cast(type[Exception], wrapper.Database.Error)

    def hold(self) -> datetime | None:
        """Take the lock if it is free, or confirm this session still holds it.

        Returns the database's clock when this beat holds the lock; None when another session
        holds it or the database cannot be reached (the connection is then dropped, and the next
        call connects again). Never raises a database error."""
        try:
            with self._connection().cursor() as cur:
                if self._held_before:
                    cur.execute(_HOLDS)
                else:
                    cur.execute("SELECT clock_timestamp(), pg_try_advisory_lock(%s)", [LOCK_KEY])
                now, held = cur.fetchone()
        except self._errors as error:
            self._drop(error)
            return None
        if not held:
            if self._held_before:  # a live session without the lock: someone unlocked it (a pooler's DISCARD)
                self._drop("the session no longer holds the lock")
            return None
        self._held_before = True
        return cast(datetime, now)

    def holder(self) -> str | None:
        """Who holds the lock, in words (its application_name, address and backend pid), for the
        logs of a standby; None when no one does or the database cannot say."""
        try:
            with self._connection().cursor() as cur:
                cur.execute(_HOLDER)
                row = cur.fetchone()
        except self._errors as error:
            self._drop(error)
            return None
        return None if row is None else f"{row[0] or '?'} ({row[1] or 'local'}, backend pid {row[2]})"

    def last_runs(self, names: Iterable[str], default: datetime) -> dict[str, datetime]:
        """The last run of each named entry as recorded. An entry without a row gets one at
        `default`, so that a new entry first runs an interval after it appears (Celery's own rule).
        Raises LockLost when the database does not answer."""
        names = list(names)
        try:
            with self._connection().cursor() as cur:
                cur.executemany(f"INSERT INTO {TABLE} (name, last_run_at) VALUES (%s, %s) "
                                "ON CONFLICT (name) DO NOTHING", [(name, default) for name in names])
                cur.execute(f"SELECT name, last_run_at FROM {TABLE} WHERE name = ANY(%s)", [names])
                return dict(cur.fetchall())
        except self._errors as error:
            self._drop(error)
            raise LockLost(str(error)) from error

    def claim(self, name: str, last_run_at: datetime, run_at: datetime) -> tuple[bool, datetime]:
        """Claim the run of entry `name` at `run_at`, if its last run is still `last_run_at`.

        Returns (True, run_at) when this beat may send it; (False, the recorded last run) when
        another beat moved it first (it is not sent). Raises LockLost when the database does not
        answer: nothing may be sent then."""
        try:
            with self._connection().cursor() as cur:
                cur.execute(f"UPDATE {TABLE} SET last_run_at = %s WHERE name = %s AND last_run_at = %s",
                            [run_at, name, last_run_at])
                if cur.rowcount == 1:
                    return True, run_at
                cur.execute(f"SELECT last_run_at FROM {TABLE} WHERE name = %s", [name])
                row = cur.fetchone()
        except self._errors as error:
            self._drop(error)
            raise LockLost(str(error)) from error
        return False, row[0] if row else run_at

    def release(self) -> None:
        """End the session, and the lock with it: a standby takes over at its next try."""
        self._drop(None)

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = self._connect()
            self._held_before = False
        return self._conn

    def _connect(self) -> Any:
        wrapper: Any = connections[self.alias]
        params = wrapper.get_connection_params()
        params.pop("cursor_factory", None)  # the driver's own cursor: none of Django's wrapping is used here
        lease_ms = int(self.lease_s * 1000)
        params.update(application_name=self.name, connect_timeout=params.get("connect_timeout", CONNECT_TIMEOUT_S),
                      # This side: a server gone silent fails the next query within the lease.
                      keepalives=1, keepalives_idle=max(1, int(self.lease_s / 3)), keepalives_interval=1,
                      keepalives_count=3, tcp_user_timeout=lease_ms)
        conn = wrapper.Database.connect(**params)
        conn.autocommit = True
        # The server's side: the session (and the lock) ends after a lease of silence.
        session = {"TimeZone": "UTC", "statement_timeout": str(lease_ms), "idle_session_timeout": str(lease_ms),
                   "tcp_keepalives_idle": str(max(1, int(self.lease_s / 3))), "tcp_keepalives_interval": "1",
                   "tcp_keepalives_count": "3", "tcp_user_timeout": str(lease_ms)}
        with conn.cursor() as cur:
            for setting, value in session.items():
                try:
                    cur.execute("SELECT set_config(%s, %s, false)", [setting, value])
                except self._errors:  # an older server without this setting: the others still bound the lease
                    logger.debug("beat: the server does not know %s", setting)
        return conn

    def _drop(self, why: object) -> None:
        if why is not None:
            logger.warning("beat: the lock's connection is gone (%s)", str(why).strip() or type(why).__name__)
        conn, self._conn, self._held_before = self._conn, None, False
        if conn is not None:
            with contextlib.suppress(self._errors):
                conn.close()
