"""A process workload's log over a real sshd (agents.ssh_logs and the script of agents.ssh_scripts):
the last lines, however long they are, exact bytes, a follow that ends with the workload or when
its reader closes it, and a log that is gone."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.base import AgentError, BindingStatus
from agents.ssh import SshConnector
from stacktools.ready import wait_for
from tests.support.ssh_binding import request

pytestmark = pytest.mark.sshd
Config = Callable[..., dict[str, Any]]


@pytest.fixture
def connector(ssh_config: Config) -> SshConnector:
    return SshConnector("lab", ssh_config())


def _ended(connector: SshConnector, status: BindingStatus) -> None:
    wait_for(lambda: Path(status.handle["dir"], "exit").exists(), what="the workload to end")


def _log(connector: SshConnector, status: BindingStatus, **kwargs: Any) -> bytes:
    return b"".join(connector.logs(status.handle, **{"tail": None, "follow": False, **kwargs}))


def test_tail_gives_the_last_lines_even_when_they_span_more_than_the_first_window(connector: SshConnector) -> None:
    # 300 lines of 1 KiB: the last 200 are 200 KiB, more than the first 64 KiB window reads.
    script = 'i=0; while [ $i -lt 300 ]; do printf "%04d %01020d\\n" $i 0; i=$((i+1)); done'
    status = connector.bind(request("lease-long", ["sh", "-c", script]))
    _ended(connector, status)
    whole = _log(connector, status)
    assert len(whole) == 300 * 1026
    lines = whole.splitlines(keepends=True)
    for tail in (0, 1, 63, 200, 299, 300, 1000):
        assert _log(connector, status, tail=tail) == b"".join(lines[len(lines) - min(tail, 300):]), tail


def test_the_log_is_passed_on_byte_for_byte(connector: SshConnector) -> None:
    # Not text, no last newline: a line that is not finished counts as the last line.
    script = r"printf 'caf\303\251\n\000\001\377 binary\r\nno newline at the end'"
    status = connector.bind(request("lease-bytes", ["sh", "-c", script]))
    _ended(connector, status)
    assert _log(connector, status) == b"caf\xc3\xa9\n\x00\x01\xff binary\r\nno newline at the end"
    assert _log(connector, status, tail=1) == b"no newline at the end"
    assert _log(connector, status, tail=2) == b"\x00\x01\xff binary\r\nno newline at the end"


def test_a_follow_ends_when_the_workload_ends_with_everything_it_wrote(connector: SshConnector) -> None:
    script = "i=0; while [ $i -lt 20 ]; do echo line $i; i=$((i+1)); sleep 0.05; done; echo last >&2; exit 4"
    status = connector.bind(request("lease-follow", ["sh", "-c", script]))
    stream = connector.logs(status.handle, tail=None, follow=True)
    body = b"".join(stream)
    assert body == b"".join(b"line %d\n" % i for i in range(20)) + b"last\n"
    assert stream.workload_ended
    assert connector.observe(status.handle).exit_code == 4


def test_a_follow_ends_when_the_process_is_killed_without_an_exit(connector: SshConnector) -> None:
    status = connector.bind(request("lease-killed", ["sh", "-c", "echo up; exec sleep 300"]))
    stream = connector.logs(status.handle, tail=None, follow=True)
    assert next(stream) == b"up\n"
    os.killpg(status.handle["pid"], signal.SIGKILL)  # no exit file is written
    assert list(stream) == [] and stream.workload_ended


def test_closing_a_follow_from_another_thread_ends_it_and_its_reader_on_the_host(connector: SshConnector) -> None:
    status = connector.bind(request("lease-close", ["sh", "-c", "echo up; exec sleep 300"]))
    stream = connector.logs(status.handle, tail=None, follow=True)
    assert next(stream) == b"up\n"
    log = Path(status.handle["log"])
    readers = wait_for(lambda: _readers(log), what="the reader on the host")
    threading.Timer(0.3, stream.close).start()
    started = time.monotonic()
    assert list(stream) == [] and not stream.workload_ended
    assert time.monotonic() - started < 2, "a blocked read returns as soon as the stream is closed"
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in readers), timeout=5,
             what="the reader on the host to end")
    connector.unbind(status.handle, grace_s=1)


def _readers(log: Path) -> list[int]:
    return [int(fd.parts[2]) for fd in Path("/proc").glob("[0-9]*/fd/3")
            if _link(fd) == log and (fd.parents[1] / "cmdline").read_bytes() == b"/bin/sh\0-s\0"]


def _link(path: Path) -> Path | None:
    try:
        return path.readlink()
    except OSError:
        return None


def test_a_log_that_is_gone_is_a_permanent_error_before_anything_is_read(connector: SshConnector) -> None:
    status = connector.bind(request("lease-nolog", ["true"]))
    _ended(connector, status)
    Path(status.handle["log"]).unlink()
    with pytest.raises(AgentError, match="no longer on") as error:
        connector.logs(status.handle, tail=10, follow=True)
    assert error.value.permanent


def test_an_unreachable_host_is_a_transient_error(ssh_config: Config) -> None:
    connector = SshConnector("lab", ssh_config())
    status = connector.bind(request("lease-away", ["true"]))
    handle = {**status.handle, "port": 1}  # nothing listens there
    connector.config = {**connector.config, "hosts": [{**connector.config["hosts"][0], "port": 1}]}
    connector.retry_delays = ()
    with pytest.raises(AgentError) as error:
        connector.logs(handle, tail=None, follow=False)
    assert not error.value.permanent
