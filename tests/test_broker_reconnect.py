"""Workers and beat try a broker that is down again at most 0.5 s apart (pool.celery.BrokerConnection),
and never give up: after a long Redis outage, passes resume within 2 s of its return. A worker
survives the loss of the broker whatever state its channel was left in."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from django.conf import settings
from kombu import Consumer, Queue
from kombu.exceptions import OperationalError

from pool.celery import RECONNECT_MAX_S, BrokerConnection, app
from stacktools.ready import free_port, wait_port


def test_the_app_connects_through_the_bounded_connection() -> None:
    with app.connection_for_write() as conn:
        assert isinstance(conn, BrokerConnection)
    assert settings.CELERY_BROKER_CONNECTION_MAX_RETRIES is None


def test_a_broker_that_refuses_is_tried_again_at_most_half_a_second_apart() -> None:
    waits: list[float] = []

    def errback(exc: Exception, interval: float) -> None:
        waits.append(interval)

    down = BrokerConnection(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    with pytest.raises(OperationalError, match=r"[Rr]efused"):
        down.ensure_connection(errback, 3)
    # kombu's own waits would be 2, 4, 6 s: a 60 s outage was found up to 12 s late.
    assert waits == [0.25, 0.5, 0.5] and RECONNECT_MAX_S == 0.5


def test_the_worker_consumer_passes_no_intervals_of_its_own(monkeypatch: Any) -> None:
    """Celery's consumer calls ensure_connection(errback, max_retries, callback=...): the bound
    applies to it (a caller passing intervals positionally keeps them)."""
    seen: dict[str, Any] = {}

    def fake(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.update(kwargs)

    monkeypatch.setattr("kombu.Connection.ensure_connection", fake)
    BrokerConnection("memory://").ensure_connection(lambda *a: None, None, callback=lambda: None)
    assert seen["interval_max"] == RECONNECT_MAX_S and "callback" in seen


def test_a_channel_whose_close_failed_on_a_dead_broker_does_not_stop_the_worker(tmp_path: Any) -> None:
    """Celery 5.7 on a lost connection: collect (the transport detached), then close. A channel
    whose close had failed on the dead socket (a BRPOP in flight), a message unacknowledged, was
    closed again through the missing transport: AttributeError ('NoneType' object has no attribute
    'hostname'), which the worker took for unrecoverable: both workers of the redis_down fault
    scenario exited at once. The state is made here step by step with a real Redis, killed."""
    port = free_port()
    with (tmp_path / "redis.log").open("wb") as log:
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(port, 30, server)
        conn = BrokerConnection(f"redis://127.0.0.1:{port}/0")
        queue = Queue("reconnect-test")
        with conn.Producer() as producer:
            producer.publish({"n": 1}, routing_key=queue.name, declare=[queue])
        channel: Any = conn.default_channel  # kombu.transport.redis.Channel
        delivered: list[Any] = []
        Consumer(channel, [queue], callbacks=[lambda body, message: delivered.append(message)]).consume()
        conn.drain_events(timeout=5)
        assert len(delivered) == 1  # delivered, not acknowledged
        channel._brpop_start(timeout=1)  # the worker's event loop keeps a BRPOP in flight
    finally:
        server.kill()
        server.wait(timeout=30)
    with pytest.raises(conn.connection_errors):
        channel.close()  # fails on the dead socket: the channel stays open
    assert not channel.closed
    conn._do_close_transport()  # how collect() ends (its own close of the channel cut short)
    conn.close()  # the close Celery's consumer makes next: no AttributeError
