"""SSH connections the host drops mid-handshake (sshd's MaxStartups under a burst of logins) are
retried within the base Connector's budget; refused and silent hosts are not (test_ssh_discover)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agents.base import HOST_OFFLINE, HOST_READY
from agents.ssh import SshConnector
from tests.support.sshd import SshServer

pytestmark = pytest.mark.sshd
Config = Callable[..., dict[str, Any]]


@contextmanager
def dropping_proxy(upstream_port: int, drop: int) -> Iterator[tuple[int, list[str]]]:
    """A TCP proxy to 127.0.0.1:`upstream_port` that hangs up on its first `drop` connections.
    Yields its port and a log with "dropped" or "forwarded" per connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    log: list[str] = []
    stop = threading.Event()

    def pump(source: socket.socket, target: socket.socket) -> None:
        with source, target:
            while chunk := _recv(source):
                target.sendall(chunk)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            if len(log) < drop:
                log.append("dropped")
                conn.close()
                continue
            log.append("forwarded")
            upstream = socket.create_connection(("127.0.0.1", upstream_port))
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], log
    finally:
        stop.set()
        thread.join()
        server.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:  # the other direction closed both sockets
        return b""


def test_a_dropped_handshake_is_retried_and_the_host_read(ssh_server: SshServer, ssh_config: Config) -> None:
    with dropping_proxy(ssh_server.port, drop=1) as (port, log):
        connector = SshConnector("lab", ssh_config([ssh_server.host("gpu-a", port=port)]))
        connector.retry_delays = (0.05, 0.05, 0.05)
        (host,) = connector.discover().hosts
    assert (host.state, host.error, len(host.gpus)) == (HOST_READY, "", 3)
    assert log == ["dropped", "forwarded"]


def test_a_host_that_keeps_dropping_is_offline_once_the_retries_are_spent(
    ssh_server: SshServer, ssh_config: Config
) -> None:
    with dropping_proxy(ssh_server.port, drop=100) as (port, log):
        connector = SshConnector("lab", ssh_config([ssh_server.host("gpu-a", port=port)]))
        connector.retry_delays = (0.05, 0.05, 0.05)
        (host,) = connector.discover().hosts
    assert host.state == HOST_OFFLINE
    assert host.error.startswith(f"SSH handshake with 127.0.0.1:{port} failed")
    assert host.error.endswith("(gave up after 4 attempts)")
    assert log == ["dropped"] * 4
