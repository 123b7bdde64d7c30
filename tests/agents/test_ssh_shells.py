"""Shells on a lease's host over a real sshd: a user's own key logs in for the lease's life only,
into a shell that sees the lease's GPUs, and the lease's end takes the key out and ends its shells.

The "host" is this machine and the client is the system `ssh`, as `gpupool ssh` runs it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.base import BIND_RUNNING, AgentError, BindRequest
from agents.shells import LEASE_ENDED, ShellLogin
from agents.ssh import SshConnector
from stacktools.ready import wait_for
from tests.support.ssh_binding import UUIDS, alive, request
from tests.support.ssh_client import UserKey, ssh_argv, ssh_run
from tests.support.sshd import SshServer

pytestmark = pytest.mark.sshd
Config = Callable[..., dict[str, Any]]


@pytest.fixture
def connector(ssh_config: Config, ssh_server: SshServer) -> SshConnector:
    # The test sshd's one keys file, which also holds gpupool's own key: it must survive every edit.
    return SshConnector("lab", ssh_config(authorized_keys=str(ssh_server.dir / "authorized_keys")))


@pytest.fixture
def shells() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:  # ours, by their own pids
        if process.poll() is None:
            process.kill()
            process.wait(5)


def session(lease_id: str) -> BindRequest:
    return BindRequest(lease_id=lease_id, host_name="gpu-a", host_address="127.0.0.1", gpu_uuids=UUIDS,
                       spec={"kind": "session"})


def login(connector: SshConnector, handle: Any, key: UserKey, tmp_path: Path, key_id: str = "k1") -> list[str]:
    where = connector.authorize_key(handle, key_id=key_id, public_key=key.public, gpu_uuids=UUIDS)
    assert isinstance(where, ShellLogin) and where.address == "127.0.0.1"
    return ssh_argv(key, address=where.address, port=where.port, user=where.user, host_key=where.host_key,
                    known_hosts=tmp_path / f"known_hosts_{key_id}")


def keys_file(server: SshServer) -> list[str]:
    return (server.dir / "authorized_keys").read_text().splitlines()


def recorded_shells(handle: Any) -> list[Path]:
    return sorted((Path(handle["dir"]) / "shells").glob("*"))


def test_a_session_shell_sees_the_lease_gpus_and_ends_with_the_lease(
        connector: SshConnector, ssh_server: SshServer, tmp_path: Path, shells: list[Any]) -> None:
    bound = connector.bind(session("lease-shell"))
    assert bound.state == BIND_RUNNING and bound.handle["kind"] == "session"
    assert connector.observe(bound.handle).state == BIND_RUNNING  # a session runs until its lease ends
    key = UserKey.make(tmp_path)
    argv = login(connector, bound.handle, key, tmp_path)
    ours = [line for line in keys_file(ssh_server) if line.endswith(" gpupool:lease-shell:k1")]
    assert len(ours) == 1 and ours[0].startswith('restrict,pty,port-forwarding,command="/bin/sh ')
    assert key.public.split()[1] in ours[0]
    ran = ssh_run(argv, 'echo "$CUDA_VISIBLE_DEVICES $GPUPOOL_LEASE_ID"')
    assert (ran.returncode, ran.stdout) == (0, f"{','.join(UUIDS)} lease-shell\n"), ran.stderr
    assert ssh_run(argv, "exit 7").returncode == 7  # the command's exit status comes back

    # A shell still open when the lease ends is ended with it (TERM ignored: KILL after the grace).
    shells.append(subprocess.Popen([*argv, "trap '' TERM; sleep 300"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    wait_for(lambda: len(recorded_shells(bound.handle)) == 3)  # the two above, and this one
    connector.unbind(bound.handle, grace_s=1)
    assert shells[0].wait(10) != 0
    assert not [line for line in keys_file(ssh_server) if "gpupool:lease-shell" in line]
    assert ssh_server.client_key  # gpupool's own key is still there, and still lets it in:
    assert connector.observe(bound.handle).state == BIND_RUNNING
    assert len(keys_file(ssh_server)) >= 1
    refused = ssh_run(argv, "true")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
    with pytest.raises(AgentError, match=LEASE_ENDED) as caught:
        connector.authorize_key(bound.handle, key_id="k2", public_key=key.public, gpu_uuids=UUIDS)
    assert caught.value.permanent
    connector.unbind(bound.handle, grace_s=1)  # idempotent


def test_a_shell_on_a_process_lease_ends_with_its_process(
        connector: SshConnector, ssh_server: SshServer, tmp_path: Path, shells: list[Any]) -> None:
    bound = connector.bind(request("lease-proc-shell", ["sleep", "300"]))
    argv = login(connector, bound.handle, UserKey.make(tmp_path), tmp_path)
    shells.append(subprocess.Popen([*argv, "sleep 300"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True))
    wait_for(lambda: recorded_shells(bound.handle))
    connector.unbind(bound.handle, grace_s=1)
    assert not alive(bound.handle["pid"])
    assert shells[0].wait(10) != 0
    assert not [line for line in keys_file(ssh_server) if "gpupool:lease-proc-shell" in line]


def test_one_key_taken_back_leaves_the_others(connector: SshConnector, tmp_path: Path) -> None:
    bound = connector.bind(session("lease-two-keys"))
    first = login(connector, bound.handle, UserKey.make(tmp_path / "a"), tmp_path, "k1")
    second = login(connector, bound.handle, UserKey.make(tmp_path / "b"), tmp_path, "k2")
    login(connector, bound.handle, UserKey.make(tmp_path / "b"), tmp_path, "k2")  # idempotent: one line
    connector.revoke_key(bound.handle, key_id="k1")
    connector.revoke_key(bound.handle, key_id="k1")
    assert ssh_run(first, "true").returncode == 255
    assert ssh_run(second, "true").returncode == 0
    connector.unbind(bound.handle, grace_s=0)
    assert ssh_run(second, "true").returncode == 255


@pytest.mark.parametrize("public_key", ["", "ssh-ed25519", "ssh-ed25519 bm90IGEga2V5", "ssh-dss AAAAB3NzaC1kc3M=",
                                        "ssh-ed25519 AAAA\ncommand=\"sh\" ssh-ed25519 AAAA"])
def test_a_public_key_that_is_not_one_is_refused_for_good(connector: SshConnector, public_key: str) -> None:
    bound = connector.bind(session("lease-bad-key"))
    with pytest.raises(AgentError) as caught:
        connector.authorize_key(bound.handle, key_id="k1", public_key=public_key, gpu_uuids=UUIDS)
    assert caught.value.permanent
