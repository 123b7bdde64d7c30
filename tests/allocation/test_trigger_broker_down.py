"""A pass trigger with the broker down: the request that asked for it is not held up. One
immediate retry (a dropped pooled connection reconnects on it), then the trigger is given up with
a warning; the periodic pass picks the work up (allocation.triggers.PUBLISH_RETRY)."""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from celery import Celery

from allocation.triggers import PUBLISH_RETRY, _send


class DroppingBroker(threading.Thread):
    """A TCP port that accepts each connection and closes it at once: a broker going away."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


def test_a_trigger_to_a_broker_that_drops_connections_is_given_up_after_one_retry(caplog: Any) -> None:
    broker = DroppingBroker()
    broker.start()
    app = Celery("down", broker=f"redis://127.0.0.1:{broker.port}/0")
    app.conf.broker_connection_retry_on_startup = False

    @app.task(name="down.noop")
    def noop() -> None:  # pragma: no cover (never runs: nothing consumes)
        return None

    with caplog.at_level(logging.WARNING, logger="allocation.triggers"):
        _send(noop)  # returns, never raises
    broker.sock.close()
    assert "could not enqueue down.noop" in caplog.text
    # The first attempt and one retry, each a connection the broker dropped: Celery's default
    # policy made four (counted here too), with 0.4 s of waits between them.
    assert PUBLISH_RETRY["max_retries"] == 1
    assert broker.accepted == 2, broker.accepted
