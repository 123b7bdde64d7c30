"""KubernetesConnector.discover() against the test API server over real HTTP."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client import Configuration

from agents.base import HOST_CORDONED, HOST_OFFLINE, HOST_READY
from agents.kubernetes import KubernetesConnector
from agents.registry import get_connector
from tests.support.kube import (
    A16_NODELIST,
    AKS_NODELIST,
    closed_port_url,
    connector_for,
    derived_node,
    make_pod,
)
from tests.support.kube_server import KubeApiServer

DERIVED_NODES = ["a100-mig-mixed", "t4-timeslicing", "gke-t4", "h100-notready",
                 "a100-mig-single-cordoned", "legacy-alpha-k80"]  # fmt: skip


def load_cluster(server: KubeApiServer) -> None:
    server.load_nodes([derived_node(name) for name in DERIVED_NODES])
    for pod in [
        make_pod("someone-elses-training", "gpu-a100-mig", 2, namespace="research"),
        make_pod("someone-elses-slice", "gpu-a100-mig", 1, resource="nvidia.com/mig-1g.10gb"),
        make_pod("gpupool-lease-1", "gpu-a100-mig", 3, namespace="gpupool-jobs", lease="lease-1"),
        make_pod("old-job", "gpu-a100-mig", 4, phase="Succeeded"),
        make_pod("broken-job", "gpu-t4-shared", 4, phase="Failed"),
        make_pod("shared-inference", "gpu-t4-shared", 1),
        make_pod("unscheduled", None, 8, phase="Pending"),
    ]:
        server.add_pod(pod)


@pytest.mark.parametrize("honour_selectors", [True, False], ids=["selectors", "no-selectors"])
def test_discovery_reads_gpu_nodes_and_counts_foreign_gpus(
    kube_api: KubeApiServer, honour_selectors: bool
) -> None:
    kube_api.honour_field_selectors = honour_selectors
    load_cluster(kube_api)

    discovery = connector_for(kube_api).discover()

    assert discovery.error == ""
    hosts = {h.name: h for h in discovery.hosts}
    assert sorted(hosts) == sorted([
        "gpu-a100-mig", "gpu-t4-shared", "gke-prod-gpu-pool-3c1a2b7e-x1z2", "gpu-h100-down",
        "gpu-a100-cordoned", "old-k80",
    ])  # fmt: skip
    mixed = hosts["gpu-a100-mig"]
    assert len(mixed.gpus) == 12
    assert mixed.foreign_gpus == 3  # 2 + 1 slice; gpupool's pod and the finished one do not count
    assert mixed.address == "10.0.0.10"
    assert hosts["gpu-t4-shared"].foreign_gpus == 1  # the Failed pod released its GPUs
    assert {g.shared_replicas for g in hosts["gpu-t4-shared"].gpus} == {4}
    assert hosts["gpu-h100-down"].state == HOST_OFFLINE
    assert hosts["gpu-a100-cordoned"].state == HOST_CORDONED
    assert hosts["gke-prod-gpu-pool-3c1a2b7e-x1z2"].taints == ("nvidia.com/gpu=present:NoSchedule",)
    assert hosts["old-k80"].state == HOST_READY

    (pod_list,) = kube_api.requests_to("GET", "/api/v1/pods")
    assert pod_list.query["fieldSelector"] == (
        "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    )


def test_discovery_of_captured_clusters_skips_nodes_without_gpus(kube_api: KubeApiServer) -> None:
    kube_api.load_nodes(A16_NODELIST)
    kube_api.load_nodes(AKS_NODELIST)
    kube_api.add_pod(make_pod("desktop", "nori", 1, namespace="vdi"))

    discovery = connector_for(kube_api).discover()

    (host,) = discovery.hosts
    assert (host.name, len(host.gpus), host.foreign_gpus) == ("nori", 1, 1)
    assert (host.gpus[0].model, host.gpus[0].memory_mb) == ("NVIDIA A16 4Q", 4096)
    assert (host.driver_version, host.cuda_version) == ("550.90.07", "12.4")


def test_cluster_without_gpus_discovers_no_hosts_and_no_error(kube_api: KubeApiServer) -> None:
    kube_api.load_nodes(AKS_NODELIST)
    assert connector_for(kube_api).discover().hosts == ()
    assert connector_for(kube_api).discover().error == ""


def test_large_lists_are_read_page_by_page(kube_api: KubeApiServer) -> None:
    load_cluster(kube_api)
    connector = connector_for(kube_api)
    connector.list_page_size = 4

    discovery = connector.discover()

    assert len(discovery.hosts) == 6
    node_pages = kube_api.requests_to("GET", "/api/v1/nodes")
    assert [r.query.get("continue") for r in node_pages] == [None, "4"]
    assert {r.query["limit"] for r in node_pages} == {"4"}


def test_unreachable_api_becomes_a_discovery_error_in_words() -> None:
    started = time.monotonic()
    discovery = connector_for(closed_port_url()).discover()

    assert discovery.hosts == ()
    assert discovery.error.startswith("cannot list nodes from Kubernetes API (http://127.0.0.1:")
    assert "connection refused" in discovery.error
    assert "gave up after 4 attempts" in discovery.error
    assert time.monotonic() - started < 5


def test_forbidden_is_reported_at_once_without_retries(kube_api: KubeApiServer) -> None:
    kube_api.fail_next(5, status=403, message='nodes is forbidden: User "gpupool" cannot list')

    discovery = connector_for(kube_api).discover()

    assert discovery.error.endswith(
        'not allowed (HTTP 403): nodes is forbidden: User "gpupool" cannot list'
    )
    assert len(kube_api.requests_to("GET", "/api/v1/nodes")) == 1


def test_slow_answer_times_out_and_the_retry_succeeds(kube_api: KubeApiServer) -> None:
    load_cluster(kube_api)
    kube_api.delay_next(1, 1.0, path_prefix="/api/v1/nodes")

    discovery = connector_for(kube_api, request_timeout=0.3).discover()

    assert discovery.error == ""
    assert len(discovery.hosts) == 6
    assert len(kube_api.requests_to("GET", "/api/v1/nodes")) == 2


# --- configuration ------------------------------------------------------------------------------


def test_valid_configs_pass() -> None:
    assert KubernetesConnector.validate_config({"kubeconfig": "/etc/kube", "context": "prod"}) == []
    assert KubernetesConnector.validate_config({"in_cluster": True, "namespace": "jobs"}) == []


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({}, "needs 'kubeconfig' (a path) or 'in_cluster: true'"),
        ({"in_cluster": True, "kubeconfig": "/k"}, "not both"),
        ({"in_cluster": "yes"}, "'in_cluster' must be true or false"),
        ({"kubeconfig": "/k", "namespace": "Bad_NS"}, "'namespace' must be a DNS label"),
        ({"kubeconfig": "/k", "request_timeout": 0}, "'request_timeout' must be a positive"),
        ({"kubeconfig": "/k", "pending_deadline_s": "soon"}, "'pending_deadline_s' must be"),
    ],
)
def test_bad_configs_are_explained(config: dict, error: str) -> None:
    assert any(error in e for e in KubernetesConnector.validate_config(config))


def test_config_keys_follow_the_contract() -> None:
    assert KubernetesConnector.kind == "kubernetes"
    assert KubernetesConnector.config_keys == {
        "kubeconfig", "in_cluster", "context", "namespace", "host", "request_timeout",
        "pending_deadline_s", "telemetry", "device_binding",
    }  # fmt: skip


def test_missing_kubeconfig_is_a_permanent_error_in_discovery(tmp_path) -> None:
    connector = KubernetesConnector("prod", {"kubeconfig": str(tmp_path / "nope")})
    discovery = connector.discover()
    assert discovery.error.startswith("cannot load Kubernetes credentials")


def test_kubeconfig_and_context_select_the_cluster(kube_api: KubeApiServer, tmp_path) -> None:
    load_cluster(kube_api)
    default_host = Configuration.get_default_copy().host
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "elsewhere", "cluster": {"server": closed_port_url()}},
                    {"name": "lab", "cluster": {"server": kube_api.url}},
                ],
                "users": [{"name": "gpupool", "user": {"token": "s3cret"}}],
                "contexts": [
                    {"name": "other", "context": {"cluster": "elsewhere", "user": "gpupool"}},
                    {"name": "prod", "context": {"cluster": "lab", "user": "gpupool"}},
                ],
                "current-context": "other",
            }
        )
    )

    connector = get_connector(
        "kubernetes", "prod", {"kubeconfig": str(kubeconfig), "context": "prod"}
    )

    assert isinstance(connector, KubernetesConnector)
    assert len(connector.discover().hosts) == 6
    first = kube_api.requests[0]
    assert first.path == "/api/v1/nodes"  # reached through the "prod" context, not "other"
    assert first.headers["authorization"] == "Bearer s3cret"
    assert Configuration.get_default_copy().host == default_host  # global config left alone
