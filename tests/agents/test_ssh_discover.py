"""SSH discovery against a real OpenSSH server whose nvidia-smi prints real captures."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.base import GPU_ERRORS_LABEL, HEALTH_OK, HOST_OFFLINE, HOST_READY, AgentError
from agents.ssh import SshConnector
from tests.support.sshd import FakeHost, SshServer, new_ed25519

pytestmark = pytest.mark.sshd
Config = Callable[..., dict[str, Any]]


def discover_one(config: dict[str, Any]) -> Any:
    discovery = SshConnector("lab", config).discover()
    assert discovery.error == ""
    (host,) = discovery.hosts
    return host


def test_h100_mig_host_is_read_over_ssh(ssh_config: Config, fake_host: FakeHost) -> None:
    fake_host.use("h100-mig")
    host = discover_one(ssh_config())
    assert (host.name, host.address, host.state, host.error) == ("gpu-a", "127.0.0.1", HOST_READY, "")
    assert host.driver_version == "590.48.01"
    gpus = [g for g in host.gpus if not g.parent_uuid]
    migs = [g for g in host.gpus if g.parent_uuid]
    assert (len(gpus), len(migs)) == (8, 56)
    assert gpus[0].uuid == "GPU-63d1e50a-b952-d15c-0740-12bc14859142"
    assert all(g.memory_mb == 81559 and g.power_w == 433.78 and g.utilization_pct is None
               for g in gpus)  # fmt: skip
    assert {m.mig_profile for m in migs} == {"1g.10gb"}
    assert {m.parent_uuid for m in migs} == {g.uuid for g in gpus}


def test_t4_host_reports_versions_and_the_foreign_process(ssh_config: Config, fake_host: FakeHost) -> None:
    fake_host.use("t4")
    host = discover_one(ssh_config())
    assert (host.driver_version, host.cuda_version) == ("515.105.01", "11.7")
    (gpu,) = host.gpus
    assert (gpu.uuid, gpu.model, gpu.memory_mb) == (
        "GPU-d37e67a5-91dd-3774-a5cb-99096249601a", "Tesla T4", 15360)  # fmt: skip
    assert [(p.pid, p.name, p.used_memory_mb) for p in gpu.processes] == [(5762, "python", 1005)]


def test_gpu_disappearing_between_two_syncs(ssh_config: Config, fake_host: FakeHost) -> None:
    connector = SshConnector("lab", ssh_config())
    before = connector.discover().hosts[0]
    fake_host.use("titanx-2")
    after = connector.discover().hosts[0]
    assert len(before.gpus) == 3 and len(after.gpus) == 2
    vanished = {g.uuid for g in before.gpus} - {g.uuid for g in after.gpus}
    assert vanished == {"GPU-50205d95-57b6-f541-2bcb-86c09afed564"}
    assert before.gpus[2].utilization_pct is None  # `[Not Supported]` in the capture
    assert before.gpus[2].processes[-1].pid is None


def test_gpu_fallen_off_the_bus_leaves_the_other_and_a_label(ssh_config: Config, fake_host: FakeHost) -> None:
    fake_host.use("p100x2-lost")
    host = discover_one(ssh_config())
    assert host.state == HOST_READY and host.driver_version == "375.66"
    assert [(g.model, g.health) for g in host.gpus] == [("Tesla P100-PCIE-12GB", HEALTH_OK)]
    assert "0000:82:00.0: GPU is lost" in host.labels[GPU_ERRORS_LABEL]


def test_wrong_host_key_is_refused_in_words_and_never_learned(ssh_server: SshServer, ssh_config: Config) -> None:
    _, other_public = new_ed25519()
    config = ssh_config([ssh_server.host("gpu-a", host_key=other_public)])
    for _ in range(2):  # a second pass refuses as well: nothing was accepted on first use
        host = discover_one(config)
        assert host.state == HOST_OFFLINE and host.gpus == ()
        assert host.error.startswith(f"host key mismatch for 127.0.0.1:{ssh_server.port}")
        assert "expected ssh-ed25519 SHA256:" in host.error and ", got ssh-ed25519 SHA256:" in host.error


def test_host_without_pinned_key_is_refused(ssh_server: SshServer, ssh_config: Config) -> None:
    entry = ssh_server.host("gpu-a")
    del entry["host_key"]
    config = ssh_config([entry, ssh_server.host("gpu-b")])
    unpinned, fine = SshConnector("lab", config).discover().hosts
    assert unpinned.state == HOST_OFFLINE and "without a pinned key are refused" in unpinned.error
    assert fine.state == HOST_READY and len(fine.gpus) == 3
    assert any("hosts[0]" in e for e in SshConnector.validate_config(config))


def test_closed_port_is_offline_with_connection_refused(ssh_server: SshServer, ssh_config: Config) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    host = discover_one(ssh_config([ssh_server.host("down", port=port)]))
    assert host.state == HOST_OFFLINE
    assert host.error == f"cannot connect to 127.0.0.1:{port}: connection refused"


def test_hosts_backing_off_are_left_out_unprobed(ssh_server: SshServer, ssh_config: Config, silent_port: int) -> None:
    config = ssh_config([ssh_server.host("gpu-a"), ssh_server.host("hung", port=silent_port)], connect_timeout=3)
    started = time.monotonic()
    discovery = SshConnector("lab", config).discover_except(frozenset({"hung"}))
    assert time.monotonic() - started < 2  # the hung host's 3 s handshake timeout was not waited for
    assert [(h.name, h.state) for h in discovery.hosts] == [("gpu-a", HOST_READY)]
    assert [h.name for h in SshConnector("lab", config).discover_except(frozenset({"gpu-a", "hung"})).hosts] == []


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP but never speaks SSH (a hung host)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_hung_host_times_out_within_connect_timeout(
    ssh_server: SshServer, ssh_config: Config, silent_port: int
) -> None:
    started = time.monotonic()
    host = discover_one(ssh_config([ssh_server.host("hung", port=silent_port)], connect_timeout=1))
    assert time.monotonic() - started < 4
    assert host.state == HOST_OFFLINE and f"127.0.0.1:{silent_port}" in host.error
    assert "handshake" in host.error


def test_slow_nvidia_smi_hits_the_command_timeout(
    ssh_config: Config, fake_host: FakeHost, nvidia_smi_fleets: Path, tmp_path: Path
) -> None:
    slow = shutil.copytree(nvidia_smi_fleets / "titanx", tmp_path / "slow-titanx")
    (slow / "sleep").write_text("5\n")
    fake_host.use(slow)
    config = ssh_config(command_timeout=1)
    started = time.monotonic()
    host = discover_one(config)
    assert time.monotonic() - started < 4
    assert host.state == HOST_OFFLINE
    assert host.error == f"command on 127.0.0.1:{config['hosts'][0]['port']} did not finish within 1s"


def test_missing_nvidia_smi_and_missing_driver_are_said_in_words(ssh_config: Config, fake_host: FakeHost) -> None:
    missing = discover_one(ssh_config(nvidia_smi="/nonexistent/nvidia-smi"))
    assert missing.state == HOST_OFFLINE and "nvidia-smi not found on the host" in missing.error
    fake_host.use("nodriver")
    no_driver = discover_one(ssh_config())
    assert "couldn't communicate with the NVIDIA driver" in no_driver.error


def test_rejected_client_key_is_an_auth_failure(ssh_config: Config) -> None:
    other_private, _ = new_ed25519()
    host = discover_one(ssh_config(private_key=other_private))
    assert host.state == HOST_OFFLINE and host.error.startswith("authentication failed for")


def test_many_hosts_in_parallel_with_one_broken(ssh_server: SshServer, ssh_config: Config) -> None:
    hosts = [ssh_server.host(f"gpu-{i:02d}") for i in range(24)]
    hosts[7]["port"] = 1  # refused
    config = ssh_config(hosts, max_parallel=8)
    started = time.monotonic()
    discovery = SshConnector("lab", config).discover()
    parallel = time.monotonic() - started
    assert [h.name for h in discovery.hosts] == [f"gpu-{i:02d}" for i in range(24)]
    broken = discovery.hosts[7]
    assert broken.state == HOST_OFFLINE and "connection refused" in broken.error
    ok = [h for h in discovery.hosts if h is not broken]
    assert all(h.state == HOST_READY and len(h.gpus) == 3 for h in ok)
    started = time.monotonic()
    SshConnector("lab", ssh_config(hosts, max_parallel=1)).discover()
    assert parallel < time.monotonic() - started  # parallel beats one at a time


def test_misconfigured_source_is_a_source_error(ssh_config: Config) -> None:
    discovery = SshConnector("lab", ssh_config(user="")).discover()
    assert discovery.hosts == () and "user is required" in discovery.error
    unreadable = SshConnector("lab", ssh_config(private_key="not a key")).discover()
    assert "not an unencrypted Ed25519, ECDSA or RSA key" in unreadable.error


def test_unreachable_host_on_observe_is_transient(ssh_server: SshServer, ssh_config: Config) -> None:
    connector = SshConnector("lab", ssh_config([ssh_server.host("down", port=1)]))
    handle = {"host": "down", "address": "127.0.0.1", "port": 1, "dir": "/x", "pid": 1,
              "start_time": "1"}  # fmt: skip
    with pytest.raises(AgentError) as refused:
        connector.observe(handle)
    assert refused.value.permanent is False


def test_host_key_refusal_on_observe_is_permanent(ssh_server: SshServer, ssh_config: Config) -> None:
    _, other_public = new_ed25519()
    connector = SshConnector("lab", ssh_config([ssh_server.host("a", host_key=other_public)]))
    handle = {"host": "a", "address": "127.0.0.1", "port": ssh_server.port, "dir": "/x",
              "pid": 1, "start_time": "1"}  # fmt: skip
    with pytest.raises(AgentError, match="host key mismatch") as refused:
        connector.observe(handle)
    assert refused.value.permanent is True
