"""Workers and beat try a broker that is down again at most 2 s apart (pool.celery.BrokerConnection),
and never give up: after a long Redis outage, passes resume within seconds of its return."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from kombu.exceptions import OperationalError

from pool.celery import RECONNECT_MAX_S, BrokerConnection, app
from stacktools.ready import free_port


def test_the_app_connects_through_the_bounded_connection() -> None:
    with app.connection_for_write() as conn:
        assert isinstance(conn, BrokerConnection)
    assert settings.CELERY_BROKER_CONNECTION_MAX_RETRIES is None


def test_a_broker_that_refuses_is_tried_again_at_most_2_s_apart() -> None:
    waits: list[float] = []

    def errback(exc: Exception, interval: float) -> None:
        waits.append(interval)

    down = BrokerConnection(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    with pytest.raises(OperationalError, match=r"[Rr]efused"):
        down.ensure_connection(errback, 3)
    # kombu's own waits would be 2, 4, 6 s: a 60 s outage was found up to 12 s late.
    assert waits == [1.0, 2.0, RECONNECT_MAX_S]


def test_the_worker_consumer_passes_no_intervals_of_its_own(monkeypatch: Any) -> None:
    """Celery's consumer calls ensure_connection(errback, max_retries, callback=...): the bound
    applies to it (a caller passing intervals positionally keeps them)."""
    seen: dict[str, Any] = {}

    def fake(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.update(kwargs)

    monkeypatch.setattr("kombu.Connection.ensure_connection", fake)
    BrokerConnection("memory://").ensure_connection(lambda *a: None, None, callback=lambda: None)
    assert seen["interval_max"] == RECONNECT_MAX_S and "callback" in seen
