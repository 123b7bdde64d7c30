"""The database health check before each request (core.db.postgresql): no round trip while the
connection shows nothing wrong, and a connection the server ended is still found unusable."""

from __future__ import annotations

import time

import psycopg2
import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_idle_healthy_connection_is_usable_without_a_round_trip() -> None:
    connection.ensure_connection()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    raw = connection.connection
    sent = []
    original = raw.cursor

    class Watch:
        def __getattr__(self, name: str) -> object:
            return getattr(raw, name)

        def cursor(self, *args: object, **kwargs: object) -> object:
            sent.append(args)
            return original(*args, **kwargs)

    connection.connection = Watch()
    try:
        assert connection.is_usable()
    finally:
        connection.connection = raw
    assert sent == []  # no cursor, no statement: the socket alone said so
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone()[0] == pid


def test_a_connection_the_server_ended_is_not_usable() -> None:
    connection.ensure_connection()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    params = connection.get_connection_params()
    other = psycopg2.connect(**params)
    other.autocommit = True
    with other.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", [pid])
    other.close()
    deadline = time.monotonic() + 5
    while connection.is_usable() and time.monotonic() < deadline:
        time.sleep(0.05)  # the server's goodbye reaches the socket
    assert not connection.is_usable()
    connection.close_if_unusable_or_obsolete()
    with connection.cursor() as cur:  # Django connects again, as at a request's start
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone()[0] != pid


def test_a_connection_inside_a_transaction_is_asked_with_a_statement() -> None:
    connection.ensure_connection()
    raw = connection.connection
    with connection.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT 1")
    try:
        assert connection.is_usable()  # Django's SELECT 1, inside the open transaction
    finally:
        raw.rollback()
