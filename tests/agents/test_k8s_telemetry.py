"""Kubernetes discovery with DCGM telemetry: the Kubernetes test server and a Prometheus-compatible
test server over real HTTP. One query per metric for the whole cluster; auth; Prometheus down,
failing, slow or not Prometheus at all is a telemetry error beside a discovery that goes on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from agents import dcgm
from agents.base import BindRequest
from agents.kubernetes import KubernetesConnector
from tests.support.kube import A16_NODELIST, connector_for, derived_node
from tests.support.kube_server import KubeApiServer
from tests.support.prometheus_server import DcgmGpu, PrometheusServer

GKE_NODE = "gke-prod-gpu-pool-3c1a2b7e-x1z2"  # derived-gke-t4: two T4s


@pytest.fixture
def kube_api(kube_api: KubeApiServer) -> KubeApiServer:
    """The registered (empty) test server with an A16 node and a GKE T4 node."""
    kube_api.load_nodes(A16_NODELIST)
    kube_api.load_nodes(derived_node("gke-t4"))
    return kube_api


@pytest.fixture
def prometheus() -> Iterator[PrometheusServer]:
    server = PrometheusServer().start()
    server.set_gpus(DcgmGpu("nori", 0, "GPU-a16", model="NVIDIA A16", util=37, fb_used=1024, temp=44, power=23.5),
                    DcgmGpu(GKE_NODE, 0, "GPU-t4-0", model="Tesla T4", util=0, temp=30),
                    DcgmGpu(GKE_NODE, 1, "GPU-t4-1", model="Tesla T4", util=100, temp=70, xid=79))
    try:
        yield server
    finally:
        server.stop()


def connector(kube: KubeApiServer, **telemetry: Any) -> KubernetesConnector:
    built = connector_for(kube, telemetry={"timeout": 1, **telemetry})
    built.retry_budget_s = 2.0
    return built


def utilisation(discovery: Any) -> dict[tuple[str, int], float | None]:
    return {(h.name, g.index): g.utilization_pct for h in discovery.hosts for g in h.gpus}


def test_discovery_reads_each_metric_once_for_the_whole_cluster(kube_api, prometheus) -> None:
    discovery = connector(kube_api, prometheus_url=prometheus.url).discover()

    assert discovery.error == "" and discovery.telemetry_ok and discovery.telemetry_error == ""
    assert utilisation(discovery) == {("nori", 0): 37, (GKE_NODE, 0): 0, (GKE_NODE, 1): 100}
    nori = next(h for h in discovery.hosts if h.name == "nori").gpus[0]
    assert (nori.memory_used_mb, nori.temperature_c, nori.power_w) == (1024, 44, 23.5)
    broken = next(h for h in discovery.hosts if h.name == GKE_NODE).gpus[1]
    assert broken.health == "unhealthy" and broken.health_reason == "XID 79 reported by DCGM"
    assert sorted(prometheus.queries()) == sorted(dcgm.METRICS)  # no per-node query, whatever the node count


def test_a_bound_pod_reads_the_gpu_dcgm_maps_it_to_not_the_one_its_index_names(kube_api, prometheus) -> None:
    built = connector(kube_api, prometheus_url=prometheus.url)
    leased = next(h for h in built.discover().hosts if h.name == GKE_NODE).gpus[0]
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    status = built.bind(BindRequest("lease-7", GKE_NODE, "", (leased.uuid,), {"kind": "pod", "pod": manifest}))
    pod = kube_api.pod(status.handle["namespace"], status.handle["name"])
    assert pod is not None and pod["metadata"]["annotations"]["gpupool.io/gpus"] == leased.uuid
    # The device plugin gave the pod the second T4 (busy); the first, index 0, sits idle.
    mapped = (status.handle["namespace"], pod["metadata"]["name"])
    prometheus.set_gpus(DcgmGpu(GKE_NODE, 0, "GPU-t4-0", util=0), DcgmGpu(GKE_NODE, 1, "GPU-t4-1", util=97, pod=mapped))

    gpus = {g.uuid: g for h in built.discover().hosts for g in h.gpus}

    assert gpus[leased.uuid].utilization_pct == 97
    assert [g.utilization_pct for u, g in gpus.items() if u != leased.uuid and "gke" in u] == [0]


def test_a_selector_narrows_every_query_to_one_cluster(kube_api, prometheus) -> None:
    for gpu in (DcgmGpu("nori", 0, "GPU-other", util=99),):
        for metric, labels, value in gpu.series():
            prometheus.add_series(metric, {**labels, "cluster": "other"}, value)
    for _, labels, _ in prometheus.series:
        labels.setdefault("cluster", "kA")

    discovery = connector(kube_api, prometheus_url=prometheus.url, selector='cluster="kA"').discover()

    assert utilisation(discovery)[("nori", 0)] == 37
    assert set(prometheus.queries()) == {f'{m}{{cluster="kA"}}' for m in dcgm.METRICS}


@pytest.mark.parametrize("auth", ["bearer", "basic"])
def test_credentials_are_sent_and_wrong_ones_are_a_telemetry_error_not_retried(kube_api, prometheus,
                                                                               auth: str) -> None:
    if auth == "bearer":
        prometheus.token = "s3cret"
        good, bad = {"token": "s3cret"}, {"token": "wrong"}
    else:
        prometheus.basic = ("grafana", "pw")
        good, bad = {"username": "grafana", "password": "pw"}, {"username": "grafana", "password": "nope"}
    assert connector(kube_api, prometheus_url=prometheus.url, **good).discover().telemetry_ok

    prometheus.requests.clear()
    discovery = connector(kube_api, prometheus_url=prometheus.url, **bad).discover()

    assert not discovery.telemetry_ok
    assert "not allowed (HTTP 401)" in discovery.telemetry_error and prometheus.url in discovery.telemetry_error
    assert len(discovery.hosts) == 2 and set(utilisation(discovery).values()) == {None}
    assert len(prometheus.requests) == 1  # permanent: not retried, the other metrics not tried


def test_prometheus_down_is_a_telemetry_error_and_discovery_goes_on_at_once(kube_api, prometheus) -> None:
    url = prometheus.url
    prometheus.stop()
    started = time.monotonic()
    discovery = connector(kube_api, prometheus_url=url).discover()

    assert time.monotonic() - started < 2
    assert discovery.error == "" and len(discovery.hosts) == 2
    assert "connection refused" in discovery.telemetry_error and "DCGM_FI_DEV_GPU_UTIL" in discovery.telemetry_error
    assert set(utilisation(discovery).values()) == {None}
    # Health is the device plugin's alone: no XID could be read.
    assert {g.health for h in discovery.hosts for g in h.gpus} == {"ok"}


def test_a_5xx_is_retried_within_the_budget(kube_api, prometheus) -> None:
    prometheus.fail_next(2, status=503, retry_after=0)
    discovery = connector(kube_api, prometheus_url=prometheus.url).discover()
    assert discovery.telemetry_ok and utilisation(discovery)[("nori", 0)] == 37
    assert len(prometheus.requests) == len(dcgm.METRICS) + 2


def test_a_prometheus_failing_on_and_on_gives_up_with_its_words(kube_api, prometheus) -> None:
    prometheus.fail_next(100, status=500)
    discovery = connector(kube_api, prometheus_url=prometheus.url).discover()
    assert "Prometheus answered HTTP 500: injected failure (gave up after" in discovery.telemetry_error
    assert len(discovery.hosts) == 2


def test_a_slow_prometheus_is_cut_off_at_the_timeout(kube_api, prometheus) -> None:
    prometheus.fail_next(1, status=0, delay_s=3)
    started = time.monotonic()
    discovery = connector(kube_api, prometheus_url=prometheus.url, timeout=0.5).discover()
    assert time.monotonic() - started < 2.5
    assert "no answer within 0.5 s" in discovery.telemetry_error and len(discovery.hosts) == 2


@pytest.mark.parametrize(("status", "body", "words"), [
    (200, "<html>Grafana</html>", "HTTP 200 (is prometheus_url the Prometheus server?)"),
    (200, '{"status": "success", "data": {"resultType": "matrix", "result": []}}', "expected an instant vector"),
    (400, '{"status": "error", "errorType": "bad_data", "error": "parse error"}', "HTTP 400: parse error"),
])
def test_an_answer_that_is_not_an_instant_vector_is_a_telemetry_error(kube_api, prometheus, status: int,
                                                                       body: str, words: str) -> None:
    prometheus.fail_next(1, status=status if status != 200 else 0, body=body)
    discovery = connector(kube_api, prometheus_url=prometheus.url).discover()
    assert words in discovery.telemetry_error and len(discovery.hosts) == 2


def test_without_telemetry_nothing_is_asked_and_nothing_is_said(kube_api, prometheus) -> None:
    discovery = connector_for(kube_api).discover()
    assert not discovery.telemetry_ok and discovery.telemetry_error == ""
    assert prometheus.requests == []


# --- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(("telemetry", "words"), [
    ({"prometheus_url": "https://prom.monitoring:9090", "token": "t", "selector": 'cluster="a",env=~"p.*"',
      "timeout": 5, "ca_file": "/etc/ca.pem", "ignore_xids": [94]}, None),
    ({"prometheus_url": "http://p", "username": "u", "password": "p"}, None),
    ("http://p", "must be a mapping"),
    ({"prometheus_url": "prom:9090"}, "must be an http(s) URL"),
    ({"prometheus_url": "ftp://p"}, "must be an http(s) URL"),
    ({}, "must be an http(s) URL"),
    ({"prometheus_url": "http://p", "token": "t", "username": "u", "password": "p"}, "not both"),
    ({"prometheus_url": "http://p", "password": "p"}, "go together"),
    ({"prometheus_url": "http://p", "token": 5}, "'telemetry.token' must be a non-empty string"),
    ({"prometheus_url": "http://p", "selector": "cluster=a"}, "PromQL label matchers"),
    ({"prometheus_url": "http://p", "selector": 'a="b"} or vector(1'}, "PromQL label matchers"),
    ({"prometheus_url": "http://p", "timeout": 0}, "positive number"),
    ({"prometheus_url": "http://p", "ignore_xids": ["79"]}, "list of XID numbers"),
    ({"prometheus_url": "http://p", "url": "x"}, "unknown key(s) 'url'"),
])
def test_telemetry_config_is_validated(telemetry: Any, words: str | None) -> None:
    errors = KubernetesConnector.validate_config({"in_cluster": True, "telemetry": telemetry})
    if words is None:
        assert errors == []
    else:
        assert any(words in e for e in errors), errors


def test_the_telemetry_secrets_are_declared_and_the_key_is_allowed() -> None:
    assert "telemetry" in KubernetesConnector.config_keys
    assert KubernetesConnector.secret_fields == ("telemetry.token", "telemetry.password")
