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
    """A fresh, empty Kubernetes API test server on 127.0.0.1, stopped after the test."""
    with running_kube_api() as server:
        yield server
