"""A lease's workload output (`GET leases/{id}/logs/`): which workload, read through which
connector, how many streams a web process serves at once, and what happens when a followed log
ends with its workload.

Both servers of the endpoint use this: the ASGI front streams on its event loop with the
connector's blocking reads on a thread pool of its own (allocation/watch/logs.py); a WSGI-only
server streams from a request thread (allocation/api/logs.py).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agents.base import AgentError, Connector, LogStream
from allocation.choices import BindingKind, LeaseState
from allocation.models import Lease
from allocation.selectors import as_lease_id, lease_list
from allocation.workloads.binding import lease_observe
from core.env import env_int
from core.errors import Conflict, DomainError, NotFound
from inventory.discovery import source_connector

#: Log streams one web process serves at once (each holds a thread while it reads), and of them
#: one user's. Over either: 503 `log_streams_busy` / 429 `too_many_log_streams`, with Retry-After.
MAX_STREAMS = env_int("GPUPOOL_LOG_STREAMS", 32)
MAX_STREAMS_PER_USER = env_int("GPUPOOL_LOG_STREAMS_PER_USER", 8)
RETRY_AFTER_S = 5
#: After a followed log ended with its workload: look at the workload this often, this many
#: times, until it is seen ended (a pod's phase may lag its container's end by a moment).
OBSERVE_TRIES = 6
OBSERVE_EVERY_S = 0.5


class LogsUnavailable(DomainError):
    """The workload's host or API server could not be reached: try again."""

    status = 502
    code = "logs_unavailable"


class LogsGone(DomainError):
    """The log no longer exists (its pod was deleted, its lease directory removed)."""

    status = 410
    code = "logs_gone"


class StreamsBusy(DomainError):
    status = 503
    code = "log_streams_busy"
    retry_after = RETRY_AFTER_S


class TooManyStreams(DomainError):
    status = 429
    code = "too_many_log_streams"
    retry_after = RETRY_AFTER_S


@dataclass(frozen=True)
class WorkloadLog:
    """Where a lease's log is, and how it is asked for."""

    lease_id: str
    user_id: int
    connector: Connector
    handle: Mapping[str, Any]
    tail: int | None
    follow: bool

    def open(self) -> LogStream:
        """Connect and start reading (seconds at most: the connector's timeouts); raises
        LogsGone or LogsUnavailable."""
        try:
            return self.connector.logs(self.handle, tail=self.tail, follow=self.follow)
        except AgentError as exc:
            raise (LogsGone if exc.permanent else LogsUnavailable)(exc.message) from None


def lease_log(*, user: Any, lease_id: Any, tail: int | None, follow: bool) -> WorkloadLog:
    """The log of a lease `user` may see. NotFound for a lease they may not see (or none);
    409 `no_workload` for a lease without a binding, 409 `workload_not_started` for one whose
    workload has not been started yet (pending, granted, or its bind still trying)."""
    key = as_lease_id(lease_id)
    lease = None
    if key is not None:
        lease = lease_list(user=user, related=False).select_related("host__source").filter(pk=key).first()
    if lease is None:
        raise NotFound("No Lease matches the given query.")
    if not lease.binding_spec:
        raise Conflict("this lease has no workload: it was requested without a binding", code="no_workload")
    if lease.binding_kind == BindingKind.SESSION:
        raise Conflict("this lease has no workload: it is a shell session (gpupool ssh)", code="no_workload")
    handle = (lease.binding_status or {}).get("handle")
    if not isinstance(handle, Mapping) or not handle or lease.host is None:
        raise Conflict(f"the lease's workload has not started yet (the lease is {lease.state}); ask again once "
                       "it is bound", code="workload_not_started")
    try:
        connector = source_connector(lease.host.source)
    except Exception as exc:  # an unknown kind, unreadable secrets
        raise LogsUnavailable(f"cannot use source {lease.host.source.name}: {exc}") from None
    return WorkloadLog(lease_id=str(lease.pk), user_id=int(user.pk), connector=connector, handle=dict(handle),
                       tail=tail, follow=follow)


def observe_ended(lease_id: str, *, close_connection: bool = True) -> None:
    """A followed log ended with its workload: record its end now (exit code, reason, the lease
    released), so that a client reading the lease next sees it, rather than after the next
    observe sweep (GPUPOOL_OBSERVE_INTERVAL_S). Never raises: the sweep does it anyway. On a
    thread that serves streams, not queries, `close_connection` closes its database connection
    after (a request thread keeps its own)."""
    from django.db import close_old_connections, connection

    try:
        if close_connection:
            close_old_connections()
        for attempt in range(OBSERVE_TRIES):
            lease = Lease.objects.select_related("host__source").filter(pk=lease_id).first()
            if lease is None or lease.state != LeaseState.BOUND:
                return
            if lease_observe(lease) not in ("starting", "running", "error"):
                return
            if attempt + 1 < OBSERVE_TRIES:
                time.sleep(OBSERVE_EVERY_S)
    except Exception:  # the database or the host away: the observe sweep will see the end
        import logging

        logging.getLogger(__name__).warning("lease %s: observing after its log ended failed", lease_id,
                                            exc_info=True)
    finally:
        if close_connection:
            connection.close()


class Slots:
    """The count of open log streams of this process, in all and per user."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, int] = {}

    @contextlib.contextmanager
    def take(self, user_id: int) -> Iterator[None]:
        """Hold a slot while the stream is open; raises StreamsBusy or TooManyStreams."""
        with self._lock:
            if sum(self._open.values()) >= MAX_STREAMS:
                raise StreamsBusy(f"this server is serving its maximum of {MAX_STREAMS} log streams; "
                                  f"retry in {RETRY_AFTER_S} s")
            if self._open.get(user_id, 0) >= MAX_STREAMS_PER_USER:
                raise TooManyStreams(f"you have {MAX_STREAMS_PER_USER} log streams open on this server, the "
                                     "most one user may; close one first")
            self._open[user_id] = self._open.get(user_id, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._open[user_id] -= 1
                if not self._open[user_id]:
                    del self._open[user_id]

    def open_count(self) -> int:
        with self._lock:
            return sum(self._open.values())


SLOTS = Slots()
