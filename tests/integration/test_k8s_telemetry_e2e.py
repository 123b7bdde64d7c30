"""Telemetry of Kubernetes GPUs end to end, on real parts: the Kubernetes test server and the
Prometheus test server over HTTP, PostgreSQL. DCGM series reach `gpus/`, the samples (history) and
idle reclaim exactly as an SSH host's nvidia-smi readings do; an XID makes the GPU unhealthy;
Prometheus down is said on the source (API and fleet page) while discovery goes on, and a lease is
never reclaimed for want of telemetry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import Lease, LeaseGpu
from allocation.services.idle import leases_idle_check
from inventory.discovery import source_discover
from inventory.models import Gpu, GpuSample, Source
from tests.support.kube import derived_node, running_kube_api
from tests.support.kube_server import KubeApiServer
from tests.support.prometheus_server import DcgmGpu, PrometheusServer

pytestmark = pytest.mark.django_db

NODE = "gke-prod-gpu-pool-3c1a2b7e-x1z2"  # derived-gke-t4: two T4s
NOW = timezone.now().replace(microsecond=0)


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    with running_kube_api() as server:
        server.load_nodes(derived_node("gke-t4"))
        yield server


@pytest.fixture
def prometheus() -> Iterator[PrometheusServer]:
    server = PrometheusServer(token="s3cret").start()
    try:
        yield server
    finally:
        server.stop()


def dcgm(prometheus: PrometheusServer, util: float = 0.0, *, xid_on: int | None = None) -> None:
    prometheus.set_gpus(*(DcgmGpu(NODE, i, f"GPU-t4-{i}", model="Tesla T4", util=util, fb_used=300 + i,
                                  temp=40 + i, power=25.0 + i, xid=79 if i == xid_on else 0) for i in range(2)))


@pytest.fixture
def pool(apply_yaml: Any, make_user: Any, api: Any, kube: KubeApiServer, prometheus: PrometheusServer) -> Any:
    """A pool with idle reclaim fed by one Kubernetes source with telemetry; ann's API client."""
    config = {
        "pools": [{"name": "k8s", "idle_reclaim": {"below_util_pct": 5, "for_s": 600, "warn_s": 120}}],
        "teams": [{"name": "a"}],
        "priority_classes": [{"name": "default", "value": 0}],
        "sources": [{"name": "kA", "kind": "kubernetes", "pool": "k8s", "host": kube.url, "request_timeout": 3,
                     "telemetry": {"prometheus_url": prometheus.url, "token": "s3cret", "timeout": 2}}],
    }
    apply_yaml(json.dumps(config), discover=False)
    dcgm(prometheus)
    return api(make_user("ann", teams=("a",)))


def discover(at: datetime) -> None:
    report = source_discover(source=Source.objects.get(name="kA"), now=at)
    assert report.errors == [] and report.gpus_seen == 2


def discover_every_minute(start: datetime, end: datetime) -> None:
    at = start
    while at <= end:
        discover(at)
        at += timedelta(seconds=60)


def granted_lease(client: Any) -> str:
    """A 1-GPU lease granted two hours ago, on a GPU discovery found before the samples start."""
    discover(NOW - timedelta(minutes=16))
    lease = client.post("/api/v1/leases/", {"pool": "k8s", "gpus": 1}, format="json").json()
    run_pass()
    Lease.objects.filter(pk=lease["id"]).update(granted_at=NOW - timedelta(hours=2))
    assert Lease.objects.get(pk=lease["id"]).state == "granted"
    return str(lease["id"])


def test_kubernetes_gpus_show_dcgm_telemetry_in_the_api_and_keep_history(pool: Any) -> None:
    discover_every_minute(NOW - timedelta(minutes=4), NOW)

    gpus = sorted(pool.get("/api/v1/gpus/?limit=100").json()["results"], key=lambda g: g["index"])
    assert [g["host"] for g in gpus] == [NODE, NODE]
    assert [(g["utilization_pct"], g["memory_used_mb"], g["temperature_c"], g["power_w"]) for g in gpus] == [
        (0.0, 300, 40.0, 25.0), (0.0, 301, 41.0, 26.0)]
    assert all(g["telemetry_at"] and g["state"] == "free" for g in gpus)
    # One sample per GPU per SAMPLE_INTERVAL (60 s) from the pass after the one that found the GPU:
    # history as for an SSH host.
    assert GpuSample.objects.filter(gpu__host__name=NODE).count() == 2 * 4
    history = pool.get(f"/api/v1/history/gpus/{gpus[1]['uuid']}/?range=1h").json()
    temperatures = next(c for c in history["charts"] if c["id"] == "temperature")["series"][0]["values"]
    assert temperatures == [41.0] * 4
    host = pool.get("/api/v1/hosts/").json()["results"][0]
    assert host["telemetry_error"] == ""
    source = Source.objects.get(name="kA")
    assert source.telemetry_at == NOW and source.telemetry_error == ""


def test_an_idle_kubernetes_lease_is_warned_then_reclaimed(pool: Any) -> None:
    lease_id = granted_lease(pool)
    discover_every_minute(NOW - timedelta(minutes=15), NOW)

    assert leases_idle_check(now=NOW) == {"warned": 1, "cleared": 0, "reclaimed": 0}
    assert Lease.objects.get(pk=lease_id).warning.startswith("idle: its GPU below 5% utilisation since")
    discover_every_minute(NOW + timedelta(seconds=60), NOW + timedelta(seconds=180))
    assert leases_idle_check(now=NOW + timedelta(seconds=180))["reclaimed"] == 1
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == "preempted" and lease.reason.startswith("reclaimed for idleness")


def test_a_busy_kubernetes_lease_is_left_alone(pool: Any, prometheus: PrometheusServer) -> None:
    dcgm(prometheus, 93.0)
    lease_id = granted_lease(pool)
    discover_every_minute(NOW - timedelta(minutes=15), NOW)
    assert leases_idle_check(now=NOW) == {"warned": 0, "cleared": 0, "reclaimed": 0}
    gpu_id = LeaseGpu.objects.get(lease_id=lease_id).gpu_id
    assert Gpu.objects.get(pk=gpu_id).utilization_pct == 93.0


def test_an_xid_makes_the_kubernetes_gpu_unhealthy_until_dcgm_clears_it(pool: Any,
                                                                      prometheus: PrometheusServer) -> None:
    dcgm(prometheus, xid_on=1)
    discover(NOW)
    gpus = {g["index"]: g for g in pool.get("/api/v1/gpus/").json()["results"]}
    assert (gpus[1]["state"], gpus[1]["health"], gpus[1]["health_reason"]) == (
        "unhealthy", "unhealthy", "XID 79 reported by DCGM")
    assert gpus[0]["state"] == "free"
    dcgm(prometheus)
    discover(NOW + timedelta(seconds=60))
    assert {g["state"] for g in pool.get("/api/v1/gpus/").json()["results"]} == {"free"}


def test_prometheus_down_is_said_on_the_source_and_no_lease_is_reclaimed_without_telemetry(
        pool: Any, prometheus: PrometheusServer, make_user: Any) -> None:
    lease_id = granted_lease(pool)
    discover_every_minute(NOW - timedelta(minutes=15), NOW)
    assert leases_idle_check(now=NOW)["warned"] == 1

    prometheus.stop()
    discover_every_minute(NOW + timedelta(seconds=60), NOW + timedelta(seconds=240))

    source = Source.objects.get(name="kA")
    assert source.last_error == "" and "connection refused" in source.telemetry_error
    assert source.telemetry_at == NOW  # the last good read
    host = pool.get("/api/v1/hosts/").json()["results"][0]
    assert host["state"] == "ready" and "connection refused" in host["telemetry_error"]
    gpus = pool.get("/api/v1/gpus/").json()["results"]
    assert len(gpus) == 2 and {(g["utilization_pct"], g["telemetry_at"]) for g in gpus} == {(None, None)}
    assert not GpuSample.objects.filter(at__gt=NOW).exists()
    # Idle samples stopped: the warning goes and the lease stays (never reclaimed on missing telemetry).
    assert leases_idle_check(now=NOW + timedelta(seconds=240)) == {"warned": 0, "cleared": 1, "reclaimed": 0}
    assert Lease.objects.get(pk=lease_id).state == "granted"

    browser = Client()
    browser.force_login(make_user("root", admin=True))
    page = browser.get("/fleet/").content.decode()
    assert "data-telemetry-error" in page and "connection refused" in page
