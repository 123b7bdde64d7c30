"""An ssh host's `time_slicing: N`: N replica facts per GPU over a real sshd (the fake nvidia-smi
prints real captures), a process lease on replicas sees the physical GPUs, and a bad count is
refused naming the field."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.base import BIND_RUNNING, BIND_SUCCEEDED, BindRequest
from agents.ssh import SshConnector
from agents.time_slicing import physical_uuids, replica_uuid
from tests.support.sshd import FakeHost, SshServer, pinned_config

Config = Callable[..., dict[str, Any]]
T4 = "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
H100_0 = "GPU-63d1e50a-b952-d15c-0740-12bc14859142"


def _discover(config: dict[str, Any]) -> Any:
    discovery = SshConnector("lab", config).discover()
    assert discovery.error == ""
    (host,) = discovery.hosts
    return host


@pytest.mark.sshd
def test_each_gpu_is_reported_as_n_replicas_with_stable_uuids(
        ssh_server: SshServer, ssh_config: Config, fake_host: FakeHost) -> None:
    fake_host.use("titanx")
    config = ssh_config([ssh_server.host("gpu-a", time_slicing=4)])
    host = _discover(config)
    physical = _discover(ssh_config()).gpus  # the same host without time-slicing
    assert len(physical) == 3 and len(host.gpus) == 12
    for gpu in physical:
        replicas = [g for g in host.gpus if g.physical_uuid == gpu.uuid]
        assert [g.uuid for g in replicas] == [gpu.uuid] + [f"{gpu.uuid}::ts{i}" for i in (1, 2, 3)]
        assert {(g.shared_replicas, g.index, g.model, g.memory_mb) for g in replicas} == {
            (4, gpu.index, gpu.model, gpu.memory_mb)}
        assert all(g.processes == gpu.processes for g in replicas)  # what nvidia-smi saw on it
    assert [g.uuid for g in _discover(config).gpus] == [g.uuid for g in host.gpus]  # stable


@pytest.mark.sshd
def test_a_mig_gpu_shares_its_slices_not_itself(
        ssh_server: SshServer, ssh_config: Config, fake_host: FakeHost) -> None:
    fake_host.use("h100-mig")
    host = _discover(ssh_config([ssh_server.host("gpu-a", time_slicing=2)]))
    parents = [g for g in host.gpus if not g.parent_uuid]
    slices = [g for g in host.gpus if g.parent_uuid]
    assert (len(parents), len(slices)) == (8, 112)  # 8 GPUs of 7 slices, each slice twice
    assert parents[0].uuid == H100_0 and {g.shared_replicas for g in parents} == {1}
    assert {g.physical_uuid[:4] for g in slices} == {"MIG-"}
    assert {g.parent_uuid for g in slices} == {g.uuid for g in parents}


@pytest.mark.sshd
def test_a_process_on_replicas_sees_each_physical_gpu_once(ssh_config: Config, tmp_path: Path) -> None:
    connector = SshConnector("lab", ssh_config())
    out = tmp_path / "cvd"
    uuids = (replica_uuid(T4, 0), replica_uuid(T4, 3), replica_uuid(H100_0, 1), "GPU-plain")
    spec = {"kind": "process", "command": ["sh", "-c", 'printf %s "$CUDA_VISIBLE_DEVICES" > "$OUT"'],
            "env": {"OUT": str(out)}}
    status = connector.bind(BindRequest(lease_id="lease-ts", host_name="gpu-a", host_address="127.0.0.1",
                                        gpu_uuids=uuids, spec=spec))
    deadline = time.monotonic() + 10
    while status.state == BIND_RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
        status = connector.observe(status.handle)
    assert status.state == BIND_SUCCEEDED
    assert out.read_text() == f"{T4},{H100_0},GPU-plain"


def test_physical_uuids_of_plain_gpus_and_mig_devices_are_themselves() -> None:
    mig = "MIG-4d0efb7d-0970-51d9-b761-0686be6b8af3"
    assert physical_uuids([mig, replica_uuid(mig, 1), replica_uuid(mig, 0), T4]) == (mig, T4)


@pytest.mark.parametrize("value", [0, -2, 1.5, "4", True, 129, None])
def test_a_bad_replica_count_is_refused_naming_the_field(value: Any) -> None:
    hosts = [{**pinned_config()["hosts"][0], "time_slicing": value}]
    errors = SshConnector.validate_config(pinned_config(hosts=hosts))
    assert len(errors) == 1 and errors[0].startswith("hosts[0]: time_slicing must be an integer from 1 to 128")
    assert repr(value) in errors[0]


def test_one_replica_is_the_default_and_changes_nothing() -> None:
    hosts = [{**pinned_config()["hosts"][0], "time_slicing": 1}]
    assert SshConnector.validate_config(pinned_config(hosts=hosts)) == []
