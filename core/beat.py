"""Celery beat that sends only while it leads, so that several beats (two beat replicas, or
`celery worker -B` in every worker) run each periodic entry once: `CELERY_BEAT_SCHEDULER`.

Every tick first asks whether this beat leads (core.beat_lock: take PostgreSQL's advisory lock, or
confirm the session still holds it, at least every CHECK_S). A standby does nothing else and asks
again CHECK_S later; the leader runs Celery's own tick, and claims each due run in the database
(`core_beat_entry`, a conditional UPDATE on the lock's own connection) before it sends it. A run
the database did not confirm is not sent.

Taking over: a leader that dies (kill -9, OOM) or stops (SIGTERM: `close` ends the session) frees
the lock at once, and a standby leads within CHECK_S (plus one round trip); one that freezes or
whose node is lost is cut off by the server after `GPUPOOL["BEAT_LEASE_S"]` of silence. The new
leader reads every entry's last run from the table, so what was due in between is sent once,
straight away, and nothing the old leader sent is sent again within its interval.

One clock: on taking the lead, a beat reads the database's clock and schedules by its own clock
plus the difference, so a beat on a host whose clock is minutes off resumes where the last leader
left off, not minutes early or late.

State lives in the database, not in a schedule file (`--schedule` is ignored): beat needs no volume.
On a database other than PostgreSQL (no advisory locks) beat runs alone, as Celery's own does.
"""

from __future__ import annotations

import copy
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.beat import ScheduleEntry, Scheduler
from django.conf import settings
from django.db import connections

from core import liveness
from core.beat_lock import BeatLock, LockLost

logger = logging.getLogger("gpupool.beat")

#: How often a standby tries for the lock, and the longest a leader sends without confirming it.
CHECK_S = 1.0


class LeaderScheduler(Scheduler):
    """Celery's in-memory Scheduler, sending only while it holds the beat lock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lock: BeatLock | None = None
        self._leading = False
        self._standby_said = False
        self._confirmed_at = float("-inf")
        self._offset = timedelta(0)
        self._claimed: tuple[str, datetime] | None = None  # (entry, when) claimed and not yet sent
        super().__init__(*args, **kwargs)
        # Wake at least every CHECK_S whatever the schedule: the lead is confirmed on a tick.
        self.max_interval = min(self.max_interval or CHECK_S, CHECK_S)  # type: ignore[assignment]

    def now(self) -> datetime:
        """This beat's estimate of the database's clock (UTC): every entry is scheduled by it."""
        return datetime.now(UTC) + self._offset

    def setup_schedule(self) -> None:
        super().setup_schedule()
        for entry in self.schedule.values():
            if entry.schedule is not None:
                entry.schedule.nowfun = self.now  # type: ignore[attr-defined]
        if connections["default"].vendor == "postgresql":
            lease_s = float(settings.GPUPOOL["BEAT_LEASE_S"])
            if lease_s < 3 * CHECK_S:
                raise ValueError(f"GPUPOOL_BEAT_LEASE_S must be at least {3 * CHECK_S:g} s (a leader confirms "
                                 f"its lead every {CHECK_S:g} s), got {lease_s:g}")
            self._lock = BeatLock(lease_s=lease_s)
        else:
            logger.warning("beat: the database is %s, not PostgreSQL: no leader election, run one beat only",
                           connections["default"].vendor)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        liveness.stamp()  # leader and standby alike: the loop turns (core.liveness)
        if not self._lead():
            return CHECK_S
        return min(super().tick(*args, **kwargs), CHECK_S)

    def reserve(self, entry: ScheduleEntry) -> Any:
        """Move `entry` to its next run, claimed in the database first (`_claim`); the entry
        returned goes back on the heap, and `apply_entry` sends only what was claimed."""
        following = next(entry)
        if self._lock is None:
            self._claimed = (str(entry.name), datetime.now(UTC))
        else:
            following = self._claim(entry, following)
        assert entry.name is not None
        self.schedule[entry.name] = following
        return following

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> Any:
        if self._claimed is None or self._claimed[0] != entry.name:
            return None  # not claimed: another beat ran it, or the lead was lost
        claimed_at, self._claimed = self._claimed[1], None
        return super().apply_entry(_expiring(entry, claimed_at), producer=producer)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._lock is not None:
                self._lock.release()  # a standby takes over at its next try, not after a lease
                self._leading = False

    @property
    def info(self) -> str:
        return f"    . leader: PostgreSQL advisory lock, checked every {CHECK_S:g} s"

    # --- the lead ---------------------------------------------------------------------------------

    def _lead(self) -> bool:
        """Whether this beat leads now: takes the lock when it is free, confirms it when held."""
        if self._lock is None:
            return True
        if self._leading and time.monotonic() - self._confirmed_at < CHECK_S:
            return True
        db_now = self._lock.hold()
        if db_now is None:
            self._stand_by()
            return False
        self._confirmed_at = time.monotonic()
        if not self._leading:
            self._take_lead(db_now)
        return self._leading

    def _take_lead(self, db_now: datetime) -> None:
        """Lead from the runs recorded in the database (the last leader's, or this beat's own)."""
        assert self._lock is not None
        self._offset = db_now - datetime.now(UTC)
        try:
            runs = self._lock.last_runs(list(self.schedule), default=self.now())
        except LockLost:
            return
        for name, entry in self.schedule.items():
            entry.last_run_at = runs[name]
        self._heap = None  # rebuilt from these times at the next Celery tick
        self._leading, self._standby_said = True, False
        logger.info("beat: leading (lock held by %s; clock offset to the database %+.3f s)", self._lock.name,
                    self._offset.total_seconds())

    def _stand_by(self) -> None:
        assert self._lock is not None
        if self._leading:
            logger.warning("beat: lost the lead; standing by")
            self._leading, self._standby_said = False, False
        if not self._standby_said:
            logger.info("beat: standing by; %s leads", self._lock.holder() or "another beat")
            self._standby_said = True

    def _claim(self, entry: ScheduleEntry, following: ScheduleEntry) -> ScheduleEntry:
        """Claim `following`'s run in the database; marks it for sending when claimed. Not claimed:
        the entry as the database has it (another beat ran it), or unchanged (the lead is lost)."""
        assert self._lock is not None and entry.name is not None
        assert entry.last_run_at is not None and following.last_run_at is not None
        try:
            claimed, recorded = self._lock.claim(entry.name, entry.last_run_at, following.last_run_at)
        except LockLost:
            logger.warning("beat: lost the lead; %s not sent", entry.name)
            self._leading = False
            return entry
        if not claimed:
            logger.warning("beat: %s was run by another beat at %s; not sent", entry.name, recorded.isoformat())
            following.last_run_at = recorded
            return following
        self._confirmed_at = time.monotonic()
        self._claimed = (entry.name, datetime.now(UTC))
        return following


def _expiring(entry: ScheduleEntry, claimed_at: datetime) -> ScheduleEntry:
    """`entry` with its relative `expires` counted from the claim rather than from the publish, so
    a send held up past its run (a leader frozen between claim and publish, deposed meanwhile)
    reaches the worker already expired and is dropped, instead of doubling the new leader's."""
    expires = (entry.options or {}).get("expires")
    if not isinstance(expires, int | float):
        return entry
    sending = copy.copy(entry)
    sending.options = {**(entry.options or {}), "expires": claimed_at + timedelta(seconds=expires)}
    return sending
