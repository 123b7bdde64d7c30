"""Waiting for things to be ready, with a deadline: a TCP port, an HTTP endpoint, any predicate.

On a busy machine a process that was started is not yet a process that answers; every client that
starts work against a process it did not see answer waits here first, and says what it waited for
when the deadline passes instead of failing later on a half-read answer.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    """Poll `predicate` until it returns something true or `timeout` passes; returns its last value
    (what a predicate found, not only whether: hence Any)."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition",
             interval: float = 0.05) -> Any:
    """`wait_until`, failing with an AssertionError that names `what` when the deadline passes."""
    value = wait_until(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"{what}: not within {timeout:g} s")
    return value


def _exited(procs: Iterable[subprocess.Popen[Any]]) -> subprocess.Popen[Any] | None:
    return next((p for p in procs if p.poll() is not None), None)


def wait_port(port: int, timeout: float, proc: subprocess.Popen[Any] | None = None) -> None:
    """Until something accepts TCP connections on 127.0.0.1:`port`; RuntimeError if `proc` exits
    first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f} s")


def http_ok(url: str, headers: dict[str, str] | None = None, timeout: float = 2.0) -> bool:
    """GET `url` answered 200 (False on any connection error or other status)."""
    import requests

    try:
        return requests.get(url, headers=headers, timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


def wait_http_ok(url: str, timeout: float = 60.0, procs: Iterable[subprocess.Popen[Any]] = (),
                 headers: dict[str, str] | None = None, what: str = "the server") -> None:
    """Until GET `url` answers 200; RuntimeError if one of `procs` exits or `timeout` passes."""
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while not http_ok(url, headers):
        gone = _exited(procs)
        if gone is not None:
            raise RuntimeError(f"{what} exited with {gone.returncode} before {url} answered")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer 200 on {url} within {timeout:.0f} s")
        time.sleep(0.2)
