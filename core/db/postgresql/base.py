"""Django's PostgreSQL backend, with the health check before each request's first query made
without a round trip where the connection shows nothing wrong.

Django checks a reused connection with `SELECT 1` (CONN_HEALTH_CHECKS) at every request: a round
trip to the server before the request's own first statement. On the lease path that is a
third of a release's round trips, and on a busy machine each one waits for the server's process
to be scheduled (9 % of the web's busy thread time in bench/bench_kueue_baseline.py).

A server that ends a connection (a restart, a failover, `pg_terminate_backend`, an idle timeout)
says so on the socket: it sends its error and closes, so the socket of an idle connection
becomes readable. A healthy idle connection receives nothing. So: nothing to read on an idle
connection, usable; anything else (something arrived, a transaction left open, an unknown state)
goes to Django's own `SELECT 1`, which reads what arrived and decides as before. A server that
vanished without a word (a host powered off) is found by neither before the request's first
statement, which fails and is answered 503 as before (core.api.errors)."""

from __future__ import annotations

import select

import psycopg2
from django.db.backends.postgresql import base
from psycopg2.extensions import TRANSACTION_STATUS_IDLE


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        conn = self.connection
        if conn is None or conn.closed:
            return False
        try:
            if conn.info.transaction_status == TRANSACTION_STATUS_IDLE:
                poller = select.poll()  # not select(): no limit on the descriptor's number
                poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
                if not poller.poll(0):
                    return True
        except (OSError, ValueError, psycopg2.Error):  # a closed descriptor, a broken connection
            return False
        return bool(super().is_usable())
