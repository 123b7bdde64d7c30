"""Process bindings over a real sshd: start, observe, unbind, idempotency, no shell injection.

The "host" is this machine, so the tests look at the started processes in /proc directly.
Zombies count as ended: PID 1 of a test container does not always reap orphans.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agents.base import (
    BIND_FAILED,
    BIND_GONE,
    BIND_RUNNING,
    BIND_SUCCEEDED,
    BindingStatus,
)
from agents.ssh import SshConnector
from stacktools.ready import wait_for
from tests.support.ssh_binding import UUIDS, alive, request

pytestmark = pytest.mark.sshd
Config = Callable[..., dict[str, Any]]


@pytest.fixture
def connector(ssh_config: Config) -> SshConnector:
    return SshConnector("lab", ssh_config())


def wait_ended(connector: SshConnector, status: BindingStatus) -> BindingStatus:
    return wait_for(lambda: (s := connector.observe(status.handle)).state != BIND_RUNNING and s)


def test_process_sees_exactly_the_leased_gpus(connector: SshConnector, tmp_path: Path) -> None:
    out = tmp_path / "cvd"
    env = {"OUT": str(out), "CUDA_VISIBLE_DEVICES": "0,1,2,3"}  # ours must win
    status = connector.bind(request("lease-cvd", ["sh", "-c", 'printf %s "$CUDA_VISIBLE_DEVICES" > "$OUT"'], env))
    assert wait_ended(connector, status).state == BIND_SUCCEEDED
    assert out.read_text() == ",".join(UUIDS)


def test_command_and_env_with_shell_syntax_run_literally(connector: SshConnector, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    nasty = ["a; touch " + str(canary), f"$(touch {canary})", f"`touch {canary}`",
             "it's \"quoted\" \\ back", "line one\nline two", "*", "'; exit 3; '",
             "@MARK@ @WRAPPER@ @STATE@ @LEASE@"]  # fmt: skip
    out = tmp_path / "argv"
    script = 'for a in "$@"; do printf "[%s]\\n" "$a"; done > "$OUT"; printf "%s" "$NASTY" > "$OUT.env"'
    status = connector.bind(request("lease-literal", ["sh", "-c", script, "sh", *nasty],
                                    {"OUT": str(out), "NASTY": nasty[1] + nasty[4]}))  # fmt: skip
    ended = wait_ended(connector, status)
    assert (ended.state, ended.exit_code) == (BIND_SUCCEEDED, 0)
    assert out.read_text() == "".join(f"[{a}]\n" for a in nasty)
    assert Path(f"{out}.env").read_text() == nasty[1] + nasty[4]
    assert not canary.exists()


def test_exit_codes_become_succeeded_or_failed(connector: SshConnector) -> None:
    ok = wait_ended(connector, connector.bind(request("lease-ok", ["true"])))
    assert (ok.state, ok.exit_code) == (BIND_SUCCEEDED, 0)
    bad = wait_ended(connector, connector.bind(request("lease-bad", ["sh", "-c", "exit 7"])))
    assert (bad.state, bad.exit_code, bad.reason) == (BIND_FAILED, 7, "process exited with code 7")
    missing = wait_ended(connector, connector.bind(request("lease-404", ["/no/such/binary"])))
    assert (missing.state, missing.exit_code) == (BIND_FAILED, 127)
    assert "not found" in Path(missing.handle["log"]).read_text()


def test_bind_twice_starts_one_process(connector: SshConnector, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    req = request("lease-once", ["sh", "-c", 'echo run >> "$RUNS"; sleep 30'], {"RUNS": str(runs)})
    with ThreadPoolExecutor(4) as pool:  # racing retries, as from two workers
        statuses = list(pool.map(lambda _: connector.bind(req), range(4)))
    statuses.append(connector.bind(req))  # and a late one
    assert {s.handle["pid"] for s in statuses} == {statuses[0].handle["pid"]}
    assert {s.state for s in statuses} == {BIND_RUNNING}
    wait_for(runs.exists)
    time.sleep(0.3)
    assert runs.read_text() == "run\n"
    connector.unbind(statuses[0].handle, grace_s=1)


def test_unbind_ends_the_whole_process_tree(connector: SshConnector, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # A child that ignores TERM (needs the KILL) and a grandchild in its own process group.
    script = ("trap '' TERM; sleep 300 & echo $! >> \"$PIDS\"; "
              "sh -c 'set -m; sleep 301 & echo $! >> \"$PIDS\"; wait' & echo $! >> \"$PIDS\"; "
              'echo $$ >> "$PIDS"; wait')  # fmt: skip
    status = connector.bind(request("lease-tree", ["sh", "-c", script], {"PIDS": str(pids)}))
    tree = wait_for(lambda: pids.exists() and len(ids := pids.read_text().split()) == 4 and ids)
    tree = [int(p) for p in tree] + [status.handle["pid"]]
    assert all(alive(p) for p in tree)
    started = time.monotonic()
    connector.unbind(status.handle, grace_s=1)
    assert time.monotonic() - started < 8
    assert [p for p in tree if alive(p)] == []
    connector.unbind(status.handle, grace_s=1)  # idempotent
    assert connector.observe(status.handle).state in {BIND_FAILED, BIND_GONE}


def test_process_killed_behind_our_back_is_gone(connector: SshConnector) -> None:
    status = connector.bind(request("lease-gone", ["sleep", "300"]))
    assert connector.observe(status.handle).state == BIND_RUNNING
    os.killpg(status.handle["pid"], signal.SIGKILL)  # wrapper and command, no exit file
    gone = wait_for(lambda: (s := connector.observe(status.handle)).state == BIND_GONE and s)
    assert f"process {status.handle['pid']} vanished" in gone.reason


def test_reused_pid_is_neither_running_nor_signalled(connector: SshConnector) -> None:
    status = connector.bind(request("lease-reuse", ["sleep", "300"]))
    forged = {**status.handle, "start_time": "1"}  # same pid, another process's start time
    assert connector.observe(forged).state == BIND_GONE
    connector.unbind(forged, grace_s=0)
    assert alive(status.handle["pid"])
    connector.unbind(status.handle, grace_s=1)
    assert not alive(status.handle["pid"])
