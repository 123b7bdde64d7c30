"""Shared Kubernetes test helpers: the `kube_api` server, connectors pointed at it, pod builders.

`kube_api` is a fixture here for `pytest_plugins = ["tests.support.kube"]` in the root conftest.
Test modules define their own three-line `kube_api` on `running_kube_api()` instead: importing
this module and registering it as a plugin from the same test module defeats pytest's assert
rewriting, and ruff reads an imported fixture used as an argument as a redefinition (F811).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agents.kubernetes import KubernetesConnector
from tests.support.kube_server import KubeApiServer

#: Node fixtures: two captured from real clusters (tests/fixtures/SOURCES.md) and hand-written
#: ones marked as derived (tests/fixtures/k8s/README.md says which and what is made up).
K8S_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
A16_NODELIST = K8S_FIXTURES / "rke2-nvidia-a16-4q-vgpu-gpu-operator-nodelist.json"
AKS_NODELIST = K8S_FIXTURES / "aks-standard-d2s-v3-3node-nogpu-nodelist.json"
#: ResourceSlices an NVIDIA DRA driver publishes for the nodes `h100-dra` (4 whole H100, one
#: tainted unhealthy, and a stale slice of an older pool generation) and `a100-dra-mig` (GPU 0
#: split into 3 MIG devices, GPU 1 whole), plus a ComputeDomain driver's slice (derived).
DRA_SLICES = K8S_FIXTURES / "derived-dra-resourceslices.json"


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def derived_node(name: str) -> dict[str, Any]:
    """A derived fixture by file name without `derived-` and `-node.json`."""
    return load_json(K8S_FIXTURES / f"derived-{name}-node.json")


def gpu_node(name: str, gpus: int, *, ready: bool = True) -> dict[str, Any]:
    """The captured A16 node (GPU Operator labels) renamed, advertising `gpus` whole GPUs
    (`nvidia.com/gpu`, no time-slicing), Ready or not."""
    node = load_json(A16_NODELIST)["items"][0]
    node["metadata"]["name"] = name
    labels = node["metadata"].setdefault("labels", {})
    labels["kubernetes.io/hostname"] = name
    labels.pop("nvidia.com/gpu.replicas", None)
    for key in ("capacity", "allocatable"):
        node["status"][key] = {k: v for k, v in node["status"][key].items() if "nvidia" not in k}
        node["status"][key]["nvidia.com/gpu"] = str(gpus)
    node["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return node


def make_pod(
    name: str,
    node: str | None,
    gpus: int = 0,
    *,
    namespace: str = "default",
    phase: str = "Running",
    lease: str | None = None,
    resource: str = "nvidia.com/gpu",
    use_requests: bool = False,
) -> dict[str, Any]:
    """A minimal Pod as the API returns it, asking for `gpus` of `resource`."""
    resources: dict[str, Any] = {}
    if gpus:
        resources = {"requests" if use_requests else "limits": {resource: str(gpus)}}
    labels = {"app": name}
    if lease:
        labels["gpupool.io/lease"] = lease
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "resources": resources}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
        "status": {"phase": phase},
    }


def connector_for(server: KubeApiServer | str, **config: Any) -> KubernetesConnector:
    """A connector whose API URL is `server` (fast retries, short timeouts for tests)."""
    url = server if isinstance(server, str) else server.url
    connector = KubernetesConnector(
        "test-cluster", {"host": url, "request_timeout": 2, "namespace": "gpupool-jobs", **config}
    )
    # The retry schedule is a class attribute; tests shrink it on the instance only.
    connector.retry_delays = (0.05, 0.1, 0.2)
    return connector


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- a cluster with Dynamic Resource Allocation (the NVIDIA driver's ResourceSlices) ---------------

H100 = "gpu-h100-dra"
A100 = "gpu-a100-dra-mig"
H100_UUIDS = ["GPU-5c0e3a57-9d2b-4f0e-8a61-1f3c2b7d9e01", "GPU-8a4f1d2c-6b3e-4c7a-9e05-2d4b6f8a1c02",
              "GPU-1e7b9c3d-2a5f-4e8b-b6c4-3f5a7d9b2e03", "GPU-9d2c4e6f-8b1a-4d3c-a7e9-4b6c8e0a3f04"]  # fmt: skip
A100_GPU0 = "GPU-ddf2a4b6-c8e0-4f1a-9b3c-5d7e9f1b3d10"
A100_GPU1 = "GPU-3c5e7a9b-1d3f-4a5c-8e7a-6f8b0d2c4e11"
A100_MIGS = ["MIG-4a6c8e0b-2d4f-5a6c-9e8a-7b9d1f3a5c20", "MIG-6c8e0a2d-4f6b-5c8e-a0b2-8d0f2b4c6e21",
             "MIG-8e0a2c4f-6b8d-5e0a-b2d4-9f1b3d5e7a22"]  # fmt: skip


def allocated_claim(
    name: str, namespace: str, devices: list[tuple[str, str]], *, lease: str | None = None, **result: Any
) -> dict[str, Any]:
    """A ResourceClaim as the scheduler leaves it once allocated: `devices` are (pool, device)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if lease:
        metadata["labels"] = {"gpupool.io/lease": lease}
    requests = [{"name": f"r{i}", "exactly": {"deviceClassName": "gpu.nvidia.com"}} for i in range(len(devices))]
    results = [{"request": f"r{i}", "driver": "gpu.nvidia.com", "pool": pool, "device": device, **result}
               for i, (pool, device) in enumerate(devices)]  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata,
            "spec": {"devices": {"requests": requests}},
            "status": {"allocation": {"devices": {"results": results}}}}  # fmt: skip


def load_dra_cluster(server: KubeApiServer) -> None:
    """Two DRA nodes, a device-plugin node beside them, and the claims and pods on them."""
    server.load_nodes([derived_node("h100-dra"), derived_node("a100-dra-mig"), derived_node("gke-t4")])
    server.load_slices(DRA_SLICES)
    for claim in [
        allocated_claim("notebook-gpu", "research", [(A100, "gpu-0-mig-19-4-1")]),
        allocated_claim("train-7f9c-gpus-x2kq", "vision", [(H100, "gpu-2")]),
        allocated_claim("gpupool-lease-9", "gpupool-jobs", [(H100, "gpu-0")], lease="lease-9"),
        allocated_claim("dcgm-monitor", "monitoring", [(H100, "gpu-1")], adminAccess=True),
        # Another driver's device of the same name in a pool of the same name: not a GPU.
        allocated_claim("fast-nic", "default", [(H100, "gpu-3")], driver="sriov.example.com"),
    ]:
        server.add_claim(claim)
    # A pod holding device-plugin GPUs on the A100 node: that count means nothing there.
    server.add_pod(make_pod("old-style-job", A100, 2, namespace="research"))



@contextmanager
def running_kube_api() -> Iterator[KubeApiServer]:
    """A fresh, empty Kubernetes API test server on 127.0.0.1, stopped on exit."""
    server = KubeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube_api() -> Iterator[KubeApiServer]:
    """A fresh, empty Kubernetes API test server on 127.0.0.1, stopped after the test (registered for
    the whole suite in tests/conftest.py; a module that wants a loaded cluster overrides it)."""
    with running_kube_api() as server:
        yield server
