"""Acceptance of the inventory: an SSH host (real sshd, fake nvidia-smi printing real captures) and
a Kubernetes API (real HTTP) that gpupool has never seen; `discover`, then the API shows it all."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from tests.support.kube import A16_NODELIST, derived_node, make_pod

pytestmark = [pytest.mark.django_db, pytest.mark.sshd]


@pytest.fixture
def fleet(apply_yaml, ssh_server, fake_host, kube_api, tmp_path: Path) -> dict[str, Any]:
    fake_host.use("h100-mig")
    key = tmp_path / "id_ed25519"
    key.write_text(ssh_server.client_key)
    key.chmod(0o600)
    kube_api.load_nodes(A16_NODELIST)
    kube_api.load_nodes(derived_node("a100-mig-mixed"))
    mig_node = derived_node("a100-mig-mixed")["metadata"]["name"]
    kube_api.add_pod(make_pod("someone-elses-training", mig_node, 1))
    hosts = [ssh_server.host("gpu-a"),
             ssh_server.host("gpu-bad-key", host_key=ssh_server.host_key.split()[0] + " AAAAC3NzaC1lZDI1NTE5AAAAIE"
                             "0xmYmRlgbwBpUNq8sWFfJpVmz3fS7v9o8QbqwvIy8d"),
             {"address": "127.0.0.1", "port": 1, "host_key": ssh_server.host_key, "name": "gpu-down"}]
    config = {
        "pools": [{"name": "training"}],
        "sources": [
            {"name": "lab", "kind": "ssh", "pool": "training", "user": ssh_server.user,
             "key_file": str(key), "nvidia_smi": fake_host.command, "hosts": hosts,
             "connect_timeout": 3, "command_timeout": 10, "state_dir": str(tmp_path / "state")},
            {"name": "prod", "kind": "kubernetes", "pool": "training", "host": kube_api.url,
             "request_timeout": 3},
        ],
    }
    apply_yaml(json.dumps(config), discover=False)
    return {"mig_node": mig_node}


def test_discover_prints_every_source_then_the_api_shows_every_gpu_right(fleet, api, make_user) -> None:
    out = StringIO()
    call_command("discover", stdout=out)
    table = out.getvalue()
    assert "gpu-a" in table and "gpu-bad-key" in table and fleet["mig_node"] in table
    admin = api(make_user("root", admin=True))

    gpus = admin.get("/api/v1/gpus/?limit=1000").json()["results"]
    ssh_gpus = [g for g in gpus if g["host"] == "gpu-a"]
    whole = [g for g in ssh_gpus if not g["parent_uuid"]]
    slices = [g for g in ssh_gpus if g["parent_uuid"]]
    assert len(whole) == 8 and len(slices) == 56
    assert {g["model"] for g in whole} == {"NVIDIA H100 80GB HBM3"}
    assert {g["memory_mb"] for g in whole} == {81559}
    assert {g["mig_profile"] for g in slices} == {"1g.10gb"}
    assert {g["parent_uuid"] for g in slices} == {g["uuid"] for g in whole}
    assert all(g["uuid"].startswith("MIG-") for g in slices)

    k8s = [g for g in gpus if g["host"] == fleet["mig_node"]]
    assert any(g["mig_profile"] == "1g.10gb" for g in k8s)
    assert sum(g["state"] == "foreign" for g in k8s) == 1
    a16 = [g for g in gpus if "A16" in g["model"]]
    assert len(a16) == 1 and a16[0]["memory_mb"] == 4096 and a16[0]["state"] == "free"

    hosts = {h["name"]: h for h in admin.get("/api/v1/hosts/?limit=100").json()["results"]}
    assert hosts["gpu-a"]["state"] == "ready" and hosts["gpu-a"]["kind"] == "ssh"
    assert hosts["gpu-a"]["driver_version"] == "590.48.01"
    assert hosts["gpu-bad-key"]["state"] == "offline"
    assert "host key" in hosts["gpu-bad-key"]["error"].lower()
    assert hosts["gpu-down"]["state"] == "offline" and hosts["gpu-down"]["error"]
    assert hosts[fleet["mig_node"]]["kind"] == "kubernetes"
    a16_host = next(h for h in hosts.values() if h["name"] == a16[0]["host"])
    assert a16_host["driver_version"] == "550.90.07" and a16_host["cuda_version"] == "12.4"


def test_a_gpu_that_falls_off_the_bus_between_two_syncs_turns_unhealthy(fleet, fake_host, api, make_user) -> None:
    from inventory.discovery import source_discover
    from inventory.models import Gpu, Source

    fake_host.use("p100x2")
    source_discover(source=Source.objects.get(name="lab"))
    assert Gpu.objects.filter(host__name="gpu-a", state="free", gone=False).count() == 2
    fake_host.use("p100x2-lost")
    source_discover(source=Source.objects.get(name="lab"))
    states = dict(Gpu.objects.filter(host__name="gpu-a", gone=False).values_list("index", "state"))
    assert states[0] == "free" and states[1] == "unhealthy", states
