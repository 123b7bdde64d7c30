"""A command in a pod's container through the API server's exec websocket (the official client's
stream against the Kubernetes test server, which runs the command here): output by stream, stdin
and its end, the exit code from the status channel, a terminal with its size, and the refusals."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agents.base import AgentError
from agents.kubernetes import KubernetesConnector
from agents.shells import STDERR, STDOUT, ExecSession
from tests.support.kube import make_pod, running_kube_api
from tests.support.kube_server import KubeApiServer

HANDLE = {"namespace": "gpupool-jobs", "name": "gpupool-lease-1"}


@pytest.fixture
def kube_api() -> Iterator[KubeApiServer]:
    with running_kube_api() as server:
        yield server


@pytest.fixture
def connector(kube_api: KubeApiServer) -> KubernetesConnector:
    kube_api.add_pod(make_pod("gpupool-lease-1", "node-1", 1, namespace="gpupool-jobs", phase="Running"))
    return KubernetesConnector("prod", {"host": kube_api.url, "namespace": "gpupool-jobs", "request_timeout": 3})


def drain(session: ExecSession, timeout: float = 10) -> dict[int, bytes]:
    out: dict[int, bytes] = {STDOUT: b"", STDERR: b""}
    deadline = time.monotonic() + timeout
    while not session.ended and time.monotonic() < deadline:
        for channel, data in session.read(0.2):
            out[channel] += data
    assert session.ended
    return out


def test_output_comes_by_stream_and_the_exit_code_from_the_status(connector: KubernetesConnector,
                                                                   kube_api: KubeApiServer) -> None:
    session = connector.exec(HANDLE, ["sh", "-c", "echo out; echo err >&2; exit 3"], tty=False, stdin=False)
    assert drain(session) == {STDOUT: b"out\n", STDERR: b"err\n"}
    assert session.exit_code == 3 and "exit code 3" in session.message
    call = kube_api.exec_calls[-1]
    assert (call.command, call.container, call.tty, call.protocol) == (
        ("sh", "-c", "echo out; echo err >&2; exit 3"), "main", False, "v5.channel.k8s.io")
    ok = connector.exec(HANDLE, ["true"], tty=False, stdin=False)
    drain(ok)
    assert (ok.exit_code, ok.message) == (0, "")


def test_stdin_reaches_the_command_and_its_end_is_an_eof(connector: KubernetesConnector) -> None:
    session = connector.exec(HANDLE, ["sh", "-c", "tr a-z A-Z; echo done"], tty=False, stdin=True)
    session.write(b"hello\n")
    session.close_stdin()
    assert drain(session)[STDOUT] == b"HELLO\ndone\n"
    assert session.exit_code == 0


def test_a_terminal_has_the_size_it_is_given_and_bytes_pass_unchanged(connector: KubernetesConnector) -> None:
    session = connector.exec(HANDLE, ["sh", "-c", "read line; stty size; printf '\\303\\251\\000\\n'"], tty=True,
                             stdin=True)
    session.resize(132, 43)
    time.sleep(0.2)
    session.write(b"go\r")
    out = drain(session)[STDOUT]
    assert b"43 132" in out and out.endswith(b"\xc3\xa9\x00\r\n"), out
    assert session.exit_code == 0


def test_a_pod_gone_or_not_running_is_refused_for_good(connector: KubernetesConnector, kube_api: KubeApiServer) -> None:
    with pytest.raises(AgentError, match="no longer exists") as gone:
        connector.exec({"namespace": "gpupool-jobs", "name": "nope"}, ["true"], tty=False, stdin=False)
    assert gone.value.permanent
    kube_api.set_pod_phase("gpupool-jobs", "gpupool-lease-1", "Pending")
    with pytest.raises(AgentError, match="Pending") as pending:
        connector.exec(HANDLE, ["true"], tty=False, stdin=False)
    assert pending.value.permanent


def test_closing_a_session_hangs_the_command_up(connector: KubernetesConnector) -> None:
    session = connector.exec(HANDLE, ["sleep", "30"], tty=False, stdin=True)
    session.close()
    assert session.read(0.5) == [] or session.ended
    session.close()  # idempotent
