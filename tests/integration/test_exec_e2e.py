"""`gpupool exec` through the production web server (gunicorn + uvicorn on pool.asgi, whose event
loop serves the exec websocket) into a pod the Kubernetes test server runs: output by stream and
the exit code, stdin, an interactive terminal on a pseudo-terminal here, the refusals, and a
client that leaves hanging the command up."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from allocation.models import AuditEvent, Lease
from stacktools.ready import wait_for
from tests.support.processes import web_server
from tests.support.tokens import api_key
from tests.support.workload_fleets import bound_lease, config, k8s_lab, pod_binding

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[str]:
    with django_db_blocker.unblock(), web_server(tmp_path_factory.mktemp("web") / "web.log",
                                                 GPUPOOL_AUTOSCHEDULE="0") as url:
        yield url


@pytest.fixture
def lab(web: str, transactional_db: Any, apply_yaml: Any, kube_api: Any, make_user: Any, api: Any,
        tmp_path: Path) -> dict[str, Any]:
    apply_yaml(config(k8s_lab(kube_api)))
    alice, carol = make_user("alice", teams=("vision",)), make_user("carol", teams=("nlp",))
    lease_id = bound_lease(api(alice), "k8s", pod_binding(["sleep", "600"]))
    handle = Lease.objects.get(pk=lease_id).binding_status["handle"]
    kube_api.set_pod_phase(handle["namespace"], handle["name"], "Running")
    return {"url": web, "lease": lease_id, "client": api(alice), "tokens": {"alice": api_key(alice),
            "carol": api_key(carol)}, "config": tmp_path / "cli.json"}


def env(lab: dict[str, Any], user: str = "alice") -> dict[str, str]:
    import gpupool_cli

    client_dir = str(Path(gpupool_cli.__file__).resolve().parents[1])
    return {**os.environ, "GPUPOOL_URL": lab["url"], "GPUPOOL_TOKEN": lab["tokens"][user],
            "GPUPOOL_CONFIG": str(lab["config"]), "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [client_dir, os.environ.get("PYTHONPATH", "")]))}


def gpupool(lab: dict[str, Any], *argv: str, user: str = "alice",
            stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "gpupool_cli", *argv], env=env(lab, user), input=stdin,
                          capture_output=True, timeout=60)


def test_exec_streams_output_and_exits_with_the_command_code(lab: dict[str, Any], kube_api: Any) -> None:
    done = gpupool(lab, "exec", lab["lease"][:8], "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out\n", b"err\n")
    call = kube_api.exec_calls[-1]
    assert (call.command, call.tty, call.stdin) == (("sh", "-c", "echo out; echo err >&2; exit 3"), False, False)
    audit = AuditEvent.objects.filter(lease_id=lab["lease"], action="lease.exec").get()
    assert audit.actor == "alice" and audit.data["command"] == list(call.command)
    assert gpupool(lab, "exec", lab["lease"], "--", "true").returncode == 0


def test_exec_i_passes_stdin_on_and_its_end(lab: dict[str, Any]) -> None:
    done = gpupool(lab, "exec", "-i", lab["lease"], "--", "sh", "-c", "tr a-z A-Z; echo end", stdin=b"hello\n")
    assert (done.returncode, done.stdout) == (0, b"HELLO\nend\n"), done.stderr


def test_exec_it_is_an_interactive_terminal_of_this_terminal_size(lab: dict[str, Any]) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 37, 101, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "gpupool_cli", "exec", "-it", lab["lease"], "--", "sh"],
                               env={**env(lab), "TERM": "xterm"}, stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        time.sleep(1.0)
        os.write(master, b"stty size; exit 5\r")
        deadline = time.monotonic() + 20
        while process.poll() is None and time.monotonic() < deadline:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        assert process.wait(10) == 5, seen
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    assert b"37 101" in seen


def test_what_cannot_be_execd_is_refused_with_the_api_error(lab: dict[str, Any]) -> None:
    other = gpupool(lab, "exec", lab["lease"], "--", "true", user="carol")
    assert other.returncode == 3 and b"(not_found)" in other.stderr
    bare = lab["client"].post("/api/v1/leases/", {"pool": "k8s", "gpus": 1}, format="json").json()
    refused = gpupool(lab, "exec", bare["id"], "--", "true")
    assert refused.returncode == 1 and b"(no_workload)" in refused.stderr
    plain = requests.get(f"{lab['url']}/api/v1/leases/{lab['lease']}/exec/?command=true",
                         headers={"Authorization": f"Token {lab['tokens']['alice']}"}, timeout=10)
    assert (plain.status_code, plain.json()["code"]) == (426, "upgrade_required")
    unknown = requests.get(f"{lab['url']}/api/v1/leases/{lab['lease']}/exec/?command=true&shell=1",
                           headers={"Authorization": f"Token {lab['tokens']['alice']}"}, timeout=10)
    assert unknown.status_code == 400 and unknown.json()["code"] == "unknown_parameter"


def test_a_client_that_leaves_hangs_the_command_up(lab: dict[str, Any], kube_api: Any) -> None:
    cli = subprocess.Popen([sys.executable, "-m", "gpupool_cli", "exec", lab["lease"], "--", "sleep", "300"],
                           env=env(lab), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: kube_api.exec_processes and kube_api.exec_calls[-1].command == ("sleep", "300"))
        command = kube_api.exec_processes[-1]
        cli.kill()  # as a closed laptop would: no goodbye
        wait_for(lambda: command.poll() is not None, timeout=15)
    finally:
        if cli.poll() is None:
            cli.kill()
        cli.wait(5)
