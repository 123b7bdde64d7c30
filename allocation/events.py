"""Lease change notifications: every committed lease transition becomes one entry in a Redis stream.

The stream is the feed of `GET leases/{id}/?wait=` and the `leases/events/` watch (see
`allocation/watch/`). It carries only who changed (lease, pool, team, new state): watchers read the
lease itself from the database, so a notification can never show a state that was not committed,
and a spurious one costs a read, never a wrong answer. Entries come from the outbox of lease events
(`allocation.outbox`): each transition's event is written in its transaction and published once,
under one stream id, in order; a stream id is a resume point like a Kubernetes resourceVersion
(every event published after it has a greater id). The stream is capped (`MAXLEN ~
STREAM_MAXLEN`); a watcher asking to resume from an id older than the cap is told so (410) and
re-lists.

A pending lease also changes without a transition: each scheduling pass rewrites its reason, queue
position and estimated start. Those are not events of the log (a queue of 20,000 leases would
flood it); the ids of the leases whose explanation changed are published, best effort, on a Redis
channel (`EXPLAINED`) after the pass commits, so that a long poll waiting on one of them answers at
once. A lost message only delays that answer until the poll's next re-read.

This module imports no model: the web server's watch endpoints import it before Django is set up.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

STREAM = "gpupool:lease-events"
# Outbox row id → stream id, for rows published whose stream id may not be recorded yet.
PUBLISHED = "gpupool:lease-events:published"
STREAM_MAXLEN = 200_000
# Pub/sub channel: comma-separated ids of pending leases whose reason, queue position or estimated
# start a pass changed (at most EXPLAINED_BATCH ids a message).
EXPLAINED = "gpupool:lease-explained"
EXPLAINED_BATCH = 2_000
_client: Any = None
logger = logging.getLogger(__name__)


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


def redis_client() -> Any:
    """One Redis client per process (thread-safe connection pool) of the configured Redis
    (core.redis_clients: a URL, or a Sentinel group's master, followed across failovers)."""
    global _client
    if _client is None:
        from core.redis_clients import configured_target, sync_client

        _client = sync_client(configured_target(), socket_timeout=2, socket_connect_timeout=2,
                              health_check_interval=30)
    return _client


def announce_explained(lease_ids: Iterable[str]) -> None:
    """Publish the ids of pending leases whose explanation changed (after the pass committed).
    Best effort: with Redis away it logs and returns, and waiting clients learn of the change at
    their long poll's next re-read instead of at once."""
    ids = [str(i) for i in lease_ids]
    if not ids:
        return
    try:
        client = redis_client()
        for start in range(0, len(ids), EXPLAINED_BATCH):
            client.publish(EXPLAINED, ",".join(ids[start:start + EXPLAINED_BATCH]))
    except Exception:
        logger.warning("could not announce %d changed lease explanations", len(ids), exc_info=True)
