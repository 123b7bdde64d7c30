"""One feed of lease changes per web process, shared by every waiting client.

A single asyncio task reads the change log, the Redis stream that `allocation.events` writes after
each commit (`XREAD BLOCK`), and hands each change to the subscribers that want it, so a thousand
waiting clients cost one reader, not a thousand pollers. Event ids are stream ids
(`1732368000000-0`); each change carries the state the lease was committed in.

Subscribers get `(event_id, LeaseChange)` pairs on an asyncio queue. A subscriber that falls too
far behind (its queue is full) is marked `overflowed` and ends its stream; the client resumes from
its last event id. A resume point older than what the log keeps is `Expired` (HTTP 410).

A subscriber for one lease (a long poll) is also woken, with a `("", POKE)` entry, when a pass
changed that pending lease's reason, queue position or estimated start: a second task listens to
the `allocation.events.EXPLAINED` channel. Those are wake-ups, not events: the stream never sends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from allocation.events import EXPLAINED, STREAM, LeaseChange
from core.redis_clients import async_client, configured_target

logger = logging.getLogger(__name__)

CHECK_S = 5.0  # how often the reader checks that the stream has not been lost
BLOCK_MS = 5_000  # XREAD BLOCK: wakes at least this often to notice shutdown
BATCH = 2_000
QUEUE_MAX = 10_000
RETRY_MAX_S = 2.0  # the longest wait between two attempts at reading a log that failed

# Database work of the watch endpoints runs here: a few long-lived threads, each with its own
# persistent Django connection, never the event loop and never the request threads of the API.
DB_EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="watch-db")


# Handed to subscribers when the log was lost: "what you knew may be stale, start again".
RESET = LeaseChange(lease_id="", pool_id=0, team_id=0, state="")
# Handed to a lease's subscribers when its explanation changed: "read it again".
POKE = LeaseChange(lease_id="", pool_id=0, team_id=0, state="explained")


class Expired(Exception):
    """The resume point is older than the oldest change the log still holds."""


class BadEventId(ValueError):
    pass


def parse_event_id(value: str) -> tuple[int, ...]:
    """A stream id (`1732368000000-3`, or `1732368000000`: sequence 0) as a comparable tuple."""
    try:
        parts = tuple(int(p) for p in value.strip().split("-"))
    except ValueError:
        raise BadEventId(f"not an event id: {value[:40]!r}") from None
    if not 1 <= len(parts) <= 2 or any(p < 0 for p in parts):
        raise BadEventId(f"not an event id: {value[:40]!r}")
    return parts


async def in_db(fn: Callable[..., Any], *args: Any) -> Any:
    """Run `fn(*args)` on the watch DB threads (fresh connection if the old one went stale)."""

    def job() -> Any:
        from django.db import close_old_connections

        close_old_connections()
        return fn(*args)

    return await asyncio.get_running_loop().run_in_executor(DB_EXECUTOR, job)


@dataclass(eq=False)
class Subscriber:
    wants: Callable[[LeaseChange], bool]
    queue: asyncio.Queue[tuple[str, LeaseChange]] = field(
        default_factory=lambda: asyncio.Queue(maxsize=QUEUE_MAX))
    overflowed: bool = False
    lease_id: str = ""  # set: this lease's changes only, and woken when its explanation changes (a long poll)
    teams: frozenset[int] | None = None  # set: these teams' changes only (a member's stream)

    def poke(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(("", POKE))

    def offer(self, event_id: str, change: LeaseChange) -> None:
        if self.overflowed or not self.wants(change):
            return
        try:
            self.queue.put_nowait((event_id, change))
        except asyncio.QueueFull:
            self.overflowed = True


class Feed:
    """The process's reader of the change log (started on first use)."""

    def __init__(self) -> None:
        self._next_check = 0.0
        self.subscribers: set[Subscriber] = set()
        # Where dispatch looks for the subscribers of a change, so that it never touches those who
        # may not see it (a thousand streams of other teams cost nothing per change): one lease's
        # (long polls, which also take pokes), some teams' (a member's streams), or any (the rest).
        self.by_lease: dict[str, set[Subscriber]] = {}
        self.by_team: dict[int, set[Subscriber]] = {}
        self.unindexed: set[Subscriber] = set()
        self._task: asyncio.Task[None] | None = None
        self._pokes: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self._redis: Any = None
        self.head = ""  # the last event id handed out (or the log's end at start)

    # --- subscribers ------------------------------------------------------------------------
    async def subscribe(self, wants: Callable[[LeaseChange], bool], *, lease_id: str = "",
                        teams: frozenset[int] | None = None) -> Subscriber:
        """A new subscriber for the changes `wants` accepts: with `lease_id`, of that lease only,
        and also poked when its explanation changes; with `teams`, of those teams' leases only."""
        await self._ensure_running()
        sub = Subscriber(wants, lease_id=lease_id, teams=teams)
        self.subscribers.add(sub)
        for bucket in self._buckets(sub, create=True):
            bucket.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        for bucket in self._buckets(sub, create=False):
            bucket.discard(sub)
        if sub.lease_id and not self.by_lease.get(sub.lease_id, True):
            del self.by_lease[sub.lease_id]
        for team in sub.teams or ():
            if not self.by_team.get(team, True):
                del self.by_team[team]

    def _buckets(self, sub: Subscriber, *, create: bool) -> list[set[Subscriber]]:
        if sub.lease_id:
            keyed: list[tuple[dict[Any, set[Subscriber]], Any]] = [(self.by_lease, sub.lease_id)]
        elif sub.teams is not None:
            keyed = [(self.by_team, team) for team in sub.teams]
        else:
            return [self.unindexed]
        if create:
            return [index.setdefault(key, set()) for index, key in keyed]
        return [index[key] for index, key in keyed if key in index]

    def poke(self, lease_ids: list[str]) -> None:
        for lease_id in lease_ids:
            for sub in list(self.by_lease.get(lease_id, ())):
                sub.poke()

    def dispatch(self, event_id: str, change: LeaseChange) -> None:
        self.head = event_id
        for bucket in (self.by_lease.get(change.lease_id), self.by_team.get(change.team_id), self.unindexed):
            for sub in list(bucket or ()):
                sub.offer(event_id, change)

    # --- the log ------------------------------------------------------------------------------
    def redis(self) -> Any:
        if self._redis is None:
            # With Sentinel, a connection that fails asks the sentinels again: the feed follows a
            # failover on its next read (_run retries).
            self._redis = async_client(configured_target(), socket_connect_timeout=2,
                                       socket_timeout=BLOCK_MS / 1000 + 5)
        return self._redis

    async def _ensure_running(self) -> None:
        if self._pokes is None or self._pokes.done():
            self._pokes = asyncio.get_running_loop().create_task(self._run_pokes(), name="lease-pokes")
        if self._task is not None and not self._task.done():
            return
        # One reader, however many subscribers arrive at once: without the lock each of them,
        # waiting on end_of_log, started a reader of its own, and every change reached every
        # subscriber once per reader.
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._task is not None and not self._task.done():
                return
            self.head = await self.end_of_log()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="lease-feed")

    async def _run_pokes(self) -> None:
        """Listen to the EXPLAINED channel for as long as the process lives (reconnecting with
        backoff); each message pokes the long polls of the leases it names."""
        delay = 0.5
        while True:
            client = async_client(configured_target(), socket_connect_timeout=2)
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(EXPLAINED)
                    delay = 0.5
                    while True:
                        message = await pubsub.get_message(timeout=BLOCK_MS / 1000)
                        if message is not None and message.get("type") == "message":
                            self.poke(_s(message["data"]).split(","))
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis away: long polls fall back on their re-reads meanwhile
                logger.warning("lease feed: the explanation channel failed; retrying in %.1fs", delay,
                               exc_info=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
            finally:
                await client.aclose()

    async def end_of_log(self) -> str:
        """The id of the newest change in the log ("0" when it is empty)."""
        last = await self.redis().xrevrange(STREAM, count=1)
        return _s(last[0][0]) if last else "0-0"

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                await self._read_stream()
                delay = 0.5
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis or the database away: waiters fall back on their timeouts
                logger.warning("lease feed: reading the change log failed; retrying in %.1fs", delay,
                               exc_info=True)
                await asyncio.sleep(delay)
                # At most 2 s apart: a Sentinel failover is over in seconds, and an attempt at a
                # Redis that is down costs a refused connection.
                delay = min(delay * 2, RETRY_MAX_S)

    async def _read_stream(self) -> None:
        client = self.redis()
        if time.monotonic() >= self._next_check:
            await self._check_continuity(client)
        reply = await client.xread({STREAM: self.head or "0-0"}, count=BATCH, block=BLOCK_MS)
        for _stream, entries in reply or []:
            for event_id, fields in entries:
                self.dispatch(_s(event_id), _change(fields))

    async def _check_continuity(self, client: Any) -> None:
        """A Redis restart or flush loses the stream, and with it changes no one has read yet:
        every subscriber is told to start again (streams end, so clients resume and are told to
        re-list; long polls re-read the lease)."""
        import redis

        self._next_check = time.monotonic() + CHECK_S
        try:
            last = _s((await client.xinfo_stream(STREAM))["last-generated-id"])
        except redis.ResponseError:  # no such key: lost, or nothing was ever written
            last = "0-0"
        if parse_event_id(last) < parse_event_id(self.head or "0-0"):
            logger.warning("lease feed: the change log went back from %s to %s (Redis restarted or "
                           "flushed); watchers start again", self.head, last)
            self.head = last
            for sub in list(self.subscribers):
                sub.overflowed = True
                with contextlib.suppress(asyncio.QueueFull):
                    sub.queue.put_nowait(("0", RESET))

    async def backlog(self, since: str, until: str) -> list[tuple[str, LeaseChange]]:
        """Changes after `since` up to and including `until`, oldest first. Raises Expired when
        the log no longer holds what followed `since`."""
        start, end = parse_event_id(since), parse_event_id(until)
        client = self.redis()
        await self._check_not_trimmed(client, since)
        if start >= end:
            return []
        out: list[tuple[str, LeaseChange]] = []
        after = f"({since}"  # exclusive range start
        while True:
            entries = await client.xrange(STREAM, min=after, max=until, count=BATCH)
            out.extend((_s(i), _change(f)) for i, f in entries)
            if len(entries) < BATCH:
                return out
            after = f"({_s(entries[-1][0])}"

    async def _check_not_trimmed(self, client: Any, since: str) -> None:
        import redis

        try:
            info = await client.xinfo_stream(STREAM)
        except redis.ResponseError:  # no stream at all: nothing was ever kept after `since`
            if parse_event_id(since) > (0, 0):
                raise Expired(since) from None
            return
        # Trimming (MAXLEN) leaves no trace of what it removed but counts: when entries were removed
        # and `since` is older than the oldest one kept, something after `since` may be gone.
        length = int(info.get("length", 0))
        removed = int(info.get("entries-added", length + 1)) > length
        oldest = info.get("recorded-first-entry-id") or (info.get("first-entry") or [None])[0]
        if length == 0:
            oldest = info.get("last-generated-id")
        if removed and oldest and parse_event_id(since) < parse_event_id(_s(oldest)):
            raise Expired(since)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _change(fields: dict[Any, Any]) -> LeaseChange:
    f = {_s(k): _s(v) for k, v in fields.items()}
    return LeaseChange(lease_id=f["lease"], pool_id=int(f["pool"]), team_id=int(f["team"]), state=f["state"])


_FEED: Feed | None = None


def feed() -> Feed:
    """The process's feed (one per event loop; web processes have one loop)."""
    global _FEED
    if _FEED is None:
        _FEED = Feed()
    return _FEED
