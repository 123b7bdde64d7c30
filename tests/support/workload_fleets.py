"""Fleets whose leases run real workloads, for the workload tests (logs, exit codes): one SSH host
(the test sshd, tests/support/sshd.py), one Kubernetes node (the test API server, whose pods
`run_pod` really runs), and the teams `vision` (alice) and `nlp` (carol)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.kube import derived_node

TEAMS = [{"name": "vision", "members": ["alice"]}, {"name": "nlp", "members": ["carol"]}]
PRIORITY = [{"name": "default", "value": 0, "grace_s": 2}]
#: The workload of the acceptance tests: two lines a second apart, then exit code 3.
HI_THERE = ["sh", "-c", "echo hi; sleep 1; echo there; exit 3"]


def ssh_lab(ssh_server: Any, fake_host: Any, state_dir: Path) -> dict[str, Any]:
    """Pool `vms`: one host, gpu-a (two P100s), of source `lab`."""
    fake_host.use("p100x2")
    return {"pools": [{"name": "vms"}],
            "sources": [{"name": "lab", "kind": "ssh", "pool": "vms", "user": ssh_server.user,
                         "private_key": ssh_server.client_key, "nvidia_smi": fake_host.command,
                         "hosts": [ssh_server.host("gpu-a")], "connect_timeout": 3, "command_timeout": 10,
                         "state_dir": str(state_dir)}]}


def k8s_lab(kube_api: Any) -> dict[str, Any]:
    """Pool `k8s`: one T4 node of source `prod`."""
    kube_api.load_nodes(derived_node("gke-t4"))
    return {"pools": [{"name": "k8s"}],
            "sources": [{"name": "prod", "kind": "kubernetes", "pool": "k8s", "host": kube_api.url,
                         "namespace": "gpupool-jobs", "request_timeout": 3}]}


def config(*labs: dict[str, Any]) -> str:
    """The configuration file (JSON is YAML) of these labs together, with the teams."""
    return json.dumps({"pools": [p for lab in labs for p in lab["pools"]], "teams": TEAMS,
                       "priority_classes": PRIORITY, "sources": [s for lab in labs for s in lab["sources"]]})


def gated(gate: Path) -> list[str]:
    """A workload that writes `hi`, waits until the file `gate` exists, then writes `there`: a
    client that reads `hi` before it makes the gate got it as it was written."""
    return ["sh", "-c", f"echo hi; while [ ! -e '{gate}' ]; do sleep 0.05; done; echo there"]


def process_binding(command: list[str]) -> dict[str, Any]:
    return {"kind": "process", "command": command}


def pod_binding(command: list[str]) -> dict[str, Any]:
    return {"kind": "pod", "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job"},
                                   "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                                            "command": command}]}}}


def bound_lease(client: Any, pool: str, binding: dict[str, Any]) -> str:
    """A lease of one GPU in `pool` with `binding`, granted and bound (its workload started)."""
    from allocation.engine import run_pass
    from allocation.workloads.binding import lease_bind

    created = client.post("/api/v1/leases/", {"pool": pool, "gpus": 1, "binding": binding}, format="json")
    assert created.status_code == 201, created.content
    lease_id = str(created.json()["id"])
    run_pass()
    assert lease_bind(lease_id) == "bound"
    return lease_id


def start_pod(kube_api: Any, lease_id: str) -> None:
    """Run the lease's pod (as its node would, once the test says so)."""
    from allocation.models import Lease

    handle = Lease.objects.get(pk=lease_id).binding_status["handle"]
    kube_api.run_pod(handle["namespace"], handle["name"])

