"""Time-slicing on a real SSH host end to end: discovery with `time_slicing: 2` over sshd, leases of
two teams through the API, a pass, and a bound process that sees the physical device once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.workloads.binding import lease_bind, lease_unbind
from inventory.models import Gpu

pytestmark = [pytest.mark.django_db, pytest.mark.sshd]


@pytest.fixture
def two_teams(apply_yaml: Any, ssh_server: Any, fake_host: Any, tmp_path: Path, make_user: Any, api: Any) -> Any:
    fake_host.use("h100-mig")  # 8 H100 split into 56 MIG slices, no foreign processes
    config = {
        "pools": [{"name": "vms"}], "teams": [{"name": "vision"}, {"name": "nlp"}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 2}],
        "sources": [{"name": "lab", "kind": "ssh", "pool": "vms", "user": ssh_server.user,
                     "private_key": ssh_server.client_key, "nvidia_smi": fake_host.command,
                     "hosts": [ssh_server.host("gpu-a", time_slicing=2)], "connect_timeout": 3,
                     "command_timeout": 10, "state_dir": str(tmp_path / "state")}],
    }
    apply_yaml(json.dumps(config))
    return api(make_user("alice", teams=("vision",))), api(make_user("bob", teams=("nlp",))), tmp_path


def _physical(lease: dict[str, Any]) -> set[str]:
    return set(Gpu.objects.filter(uuid__in=lease["gpus"]).values_list("physical_uuid", flat=True))


def test_replicas_of_one_mig_device_serve_one_team_and_its_process_sees_the_device(two_teams: Any) -> None:
    alice, bob, tmp = two_teams
    assert Gpu.objects.filter(mig_profile="1g.10gb", shared_replicas=2).count() == 112
    out = tmp / "visible.txt"
    binding = {"kind": "process", "command": ["sh", "-c", f'echo "$CUDA_VISIBLE_DEVICES" > {out}']}
    mine = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 2, "model": "1g.10gb", "binding": binding},
                      format="json").json()
    run_pass()
    theirs = bob.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "model": "1g.10gb"}, format="json").json()
    run_pass()
    mine = alice.get(f"/api/v1/leases/{mine['id']}/").json()
    theirs = bob.get(f"/api/v1/leases/{theirs['id']}/").json()
    assert mine["state"] == theirs["state"] == "granted"
    (device,) = _physical(mine)  # both replicas of one MIG device
    assert device.startswith("MIG-") and _physical(theirs) != {device}

    assert lease_bind(mine["id"]) == "bound"
    deadline = time.monotonic() + 15
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert out.read_text().strip() == device  # named once, though the lease holds two replicas
    alice.post(f"/api/v1/leases/{mine['id']}/release/")
    lease_unbind(mine["id"])
    assert Lease.objects.get(pk=mine["id"]).state == "released"
