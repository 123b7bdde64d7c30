"""Publishing the outbox after commits from one thread per web process, instead of from each
request that committed (allocation.outbox.publish_after_commit).

A write's own publish cost it five statements and two Redis calls after its commit (the relay's
lock, its read, the script, the mark, the look for more): ~20% of a lease create's and release's
web time in bench/bench_lease_path.py's flame graphs. Here a commit only wakes the process's relay
thread; the thread runs `relay_after_write`, and wakes that arrive while it runs make it run once
more, so under load one relay publishes the rows of many writes. Nothing else changes: each row is
still published once, in order, by whichever relay holds the lock, and the periodic relay
(`allocation.relay_lease_events`) still publishes what a crash leaves. The web server turns it on
(pool/asgi.py); elsewhere (workers, commands, tests) writers publish inline as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class RelayThread:
    """A daemon thread running `publish` once after each `wake()`, wakes during a run coalesced
    into one more run. It starts on the first wake (after gunicorn's fork, in the worker)."""

    def __init__(self, publish: Callable[[], None]) -> None:
        self._publish = publish
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopping = False
        self.runs = 0

    def wake(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._loop, name="gpupool-outbox-relay", daemon=True)
                    self._thread.start()
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread (after its current run) and close its database connection."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        from django.db import connections

        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                connections.close_all()
                return
            try:
                self._publish()
            except Exception:  # never let the thread die: the periodic relay covers this round
                logger.warning("the outbox relay thread failed a round; the periodic relay will publish",
                               exc_info=True)
            finally:
                self.runs += 1
                _drop_broken_or_aged()


def _drop_broken_or_aged() -> None:
    """This thread's connection lives outside any request: close it once a query failed on it or
    CONN_MAX_AGE passed (the next round opens a new one). Not Django's close_old_connections, which
    would also make the next round's first query a health check (one more round trip a round)."""
    import time

    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if conn.errors_occurred or (conn.close_at is not None and time.monotonic() >= conn.close_at):
            conn.close_if_unusable_or_obsolete()
