"""Stopping process bindings over a real sshd: the grace is seconds on the host's clock, and a
binding known only by its name (a bind that failed or was abandoned) is stopped and kept from
starting.

The "host" is this machine, so the tests look at the processes in /proc directly.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.base import BIND_RUNNING, AgentError, BindRequest
from agents.ssh import SshConnector
from stacktools.ready import wait_for
from tests.support.ssh_binding import alive, request

pytestmark = pytest.mark.sshd
Config = Callable[..., dict[str, Any]]

# Ignores TERM in the shell and in its child: only the KILL after the grace ends it.
STUBBORN = ["sh", "-c", "trap '' TERM; sleep 300 & wait; sleep 300"]


@pytest.fixture
def connector(ssh_config: Config) -> SshConnector:
    return SshConnector("lab", ssh_config())


def _session_members(leader: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == leader and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.mark.parametrize("grace_s", [1, 3])
def test_a_process_that_ignores_term_is_killed_after_the_grace_in_seconds(connector: SshConnector,
                                                                       grace_s: int) -> None:
    status = connector.bind(request(f"lease-stubborn-{grace_s}", STUBBORN))
    leader = status.handle["pid"]
    wait_for(lambda: len(_session_members(leader)) >= 2)  # the shell and its sleep
    started = time.monotonic()
    connector.unbind(status.handle, grace_s=grace_s)
    took = time.monotonic() - started
    # The grace is waited out in full (TERM is ignored), then KILL; the old loop counted turns
    # of 50 ms plus a /proc scan each, and took twice the grace on this very host.
    assert grace_s <= took < grace_s + 1.5, took
    assert _session_members(leader) == []


def test_a_process_that_honours_term_ends_the_stop_at_once_whatever_the_grace(connector: SshConnector) -> None:
    status = connector.bind(request("lease-polite", ["sleep", "300"]))
    started = time.monotonic()
    connector.unbind(status.handle, grace_s=30)
    assert time.monotonic() - started < 2  # noticed within a look (0.1 s), not after the grace
    assert not alive(status.handle["pid"])


def _by_name(connector: SshConnector, lease_id: str, command: list[str]) -> tuple[BindRequest, dict[str, Any]]:
    req = request(lease_id, command)
    handle = connector.bind_handle(req)
    assert handle is not None and "pid" not in handle
    return req, dict(handle)


def test_a_binding_stopped_by_name_before_its_bind_never_starts(connector: SshConnector, tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    req, handle = _by_name(connector, "lease-cancelled", ["touch", str(ran)])
    connector.unbind(handle, grace_s=1)  # nothing there yet: marked cancelled
    with pytest.raises(AgentError, match="stopped before it started") as caught:
        connector.bind(req)  # a bind that comes late (its task was slow) starts nothing
    assert caught.value.permanent
    time.sleep(0.3)
    assert not ran.exists()


def test_a_binding_stopped_by_name_after_its_bind_is_ended_with_its_whole_session(connector: SshConnector) -> None:
    req, handle = _by_name(connector, "lease-abandoned", STUBBORN)
    status = connector.bind(req)  # its reply "lost": the caller only knows the lease's name
    leader = status.handle["pid"]
    wait_for(lambda: len(_session_members(leader)) >= 2)
    connector.unbind(handle, grace_s=1)
    assert _session_members(leader) == []
    connector.unbind(handle, grace_s=1)  # idempotent


def test_a_requeued_lease_binds_under_its_generation_apart_from_its_first_binding(connector: SshConnector) -> None:
    first = connector.bind(request("lease-gen", ["sleep", "300"]))
    again = BindRequest(**{**request("lease-gen", ["sleep", "301"]).__dict__, "generation": 1})
    second = connector.bind(again)
    try:
        assert second.state == BIND_RUNNING and second.handle["pid"] != first.handle["pid"]
        assert first.handle["dir"].endswith("/leases/lease-gen")
        assert second.handle["dir"].endswith("/leases/lease-gen-1")
        connector.unbind(connector.bind_handle(request("lease-gen", ["x"])) or {}, grace_s=0)  # the first, by name
        assert not alive(first.handle["pid"]) and alive(second.handle["pid"])
    finally:
        for pid in (first.handle["pid"], second.handle["pid"]):
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)  # ours: the session the bind started
