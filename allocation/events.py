"""Lease change notifications: every committed lease transition becomes one entry in a Redis stream.

The stream is the feed of `GET leases/{id}/?wait=` and the `leases/events/` watch (see
`allocation/watch/`). It carries only who changed (lease, pool, team, new state): watchers read the
lease itself from the database, so a notification can never show a state that was not committed,
and a spurious one costs a read, never a wrong answer. Entries are written after the commit
(`transaction.on_commit`), in commit order, so a stream id is a resume point like a Kubernetes
resourceVersion. The stream is capped (`MAXLEN ~ STREAM_MAXLEN`); a watcher asking to resume from
an id older than the cap is told so (410) and re-lists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

logger = logging.getLogger(__name__)

STREAM = "gpupool:lease-events"
STREAM_MAXLEN = 200_000
_client: Any = None


@dataclass(frozen=True)
class LeaseChange:
    """One committed change of a lease: enough for a watcher to decide whether it cares."""

    lease_id: str
    pool_id: int
    team_id: int
    state: str

    def fields(self) -> dict[str, str]:
        return {"lease": self.lease_id, "pool": str(self.pool_id), "team": str(self.team_id),
                "state": self.state}


def redis_url() -> str:
    """settings.REDIS_URL: always set (a configured server, or the embedded one core.embedded
    starts); its absence is a broken configuration, not a mode."""
    url = getattr(settings, "REDIS_URL", None)
    if not url:
        raise ImproperlyConfigured("REDIS_URL is not set: the lease change stream needs Redis")
    return str(url)


def redis_client() -> Any:
    """One Redis client per process (thread-safe connection pool) for settings.REDIS_URL."""
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(redis_url(), socket_timeout=2, socket_connect_timeout=2,
                                       health_check_interval=30)
    return _client


def announce(changes: Iterable[LeaseChange]) -> None:
    """Publish `changes` once the current transaction commits (at once outside a transaction).
    A failure to publish is logged and swallowed: watchers time out and re-read, nothing is lost
    from the ledger."""
    batch = list(changes)
    if batch:
        transaction.on_commit(lambda: publish(batch))


def announce_lease(lease: Any) -> None:
    """`announce` for one in-memory lease, with the state it is being saved in."""
    announce([LeaseChange(str(lease.pk), lease.pool_id, lease.team_id, str(lease.state))])


def publish(batch: list[LeaseChange]) -> None:
    if not batch:
        return
    try:
        with redis_client().pipeline(transaction=False) as pipe:
            for change in batch:
                pipe.xadd(STREAM, change.fields(), maxlen=STREAM_MAXLEN, approximate=True)
            pipe.execute()
    except Exception:
        logger.warning("could not publish %d lease change(s); watchers will catch up by timeout",
                       len(batch), exc_info=True)
