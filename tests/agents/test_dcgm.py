"""DCGM exporter series → GPU readings: parsing Prometheus answers, pairing devices with the GPUs of
a node (whole GPUs, real UUIDs, pods, MIG, time-slicing), health from XID/ECC. Pure, no I/O."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agents import dcgm
from agents.base import HEALTH_OK, HEALTH_UNHEALTHY, GpuFact, HostFact
from agents.k8s_nodes import node_to_host
from agents.k8s_telemetry import merge_telemetry
from tests.support.kube import derived_node, make_pod
from tests.support.prometheus_server import DcgmGpu


def answers(*gpus: DcgmGpu) -> dict[str, list[dict[str, Any]]]:
    """What Prometheus answers to one query per metric for these GPUs."""
    out: dict[str, list[dict[str, Any]]] = {m: [] for m in dcgm.METRICS}
    for gpu in gpus:
        for metric, labels, value in gpu.series():
            out[metric].append({"metric": labels, "value": [1_700_000_000.5, _text(value)]})
    return out


def _text(value: float | str) -> str:
    return value if isinstance(value, str) else repr(float(value))


def host(name: str) -> HostFact:
    return node_to_host(derived_node(name), [], "c1")


def merged(facts: HostFact, *gpus: DcgmGpu, pods: list[dict[str, Any]] | None = None) -> dict[str, GpuFact]:
    (out,) = merge_telemetry([facts], answers(*gpus), pods or [])
    return {g.uuid: g for g in out.gpus}


# --- parsing ------------------------------------------------------------------------------------


def test_a_real_shaped_answer_parses_into_devices_by_node_with_their_values() -> None:
    gpu = DcgmGpu("gpu-h100-down", 3, "GPU-8f2c1d90-aaaa-bbbb-cccc-000000000003", util=87, fb_used=40_123,
                  temp=61, power=402.5, pod=("research", "train-0"))
    (device,) = dcgm.node_readings(answers(gpu))["gpu-h100-down"]
    assert (device.gpu, device.uuid, device.instance, device.profile) == (3, gpu.uuid, None, "")
    assert device.values == {dcgm.UTIL: 87, dcgm.FB_USED: 40_123, dcgm.FB_FREE: 81_000, dcgm.TEMP: 61,
                             dcgm.POWER: 402.5, dcgm.XID: 0, dcgm.ROW_REMAP_FAILURE: 0}
    # exported_pod (the mapped pod) wins over the scrape target's own pod label.
    assert ("research", "train-0") in device.pods


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "9223372036854775794", "2147483632", "junk", "101"])
def test_values_that_are_not_readings_are_dropped(value: str) -> None:
    (device,) = dcgm.node_readings(answers(DcgmGpu("n1", 0, "GPU-0", util=value)))["n1"]
    assert dcgm.UTIL not in device.values and device.values[dcgm.TEMP] == 35


def test_series_without_a_node_or_a_device_are_skipped_and_a_relabelled_node_wins() -> None:
    data = answers(DcgmGpu("pod-hostname-xyz", 0, "GPU-0"))
    for sample in data[dcgm.UTIL]:
        sample["metric"]["node"] = "gpu-node-1"
    data[dcgm.TEMP].append({"metric": {"gpu": "0", "UUID": "GPU-9"}, "value": [1, "50"]})  # no node
    data[dcgm.TEMP].append({"metric": {"Hostname": "n2"}, "value": [1, "50"]})  # no device
    data[dcgm.TEMP].append({"value": [1, "50"]})
    readings = dcgm.node_readings(data)
    assert set(readings) == {"gpu-node-1", "pod-hostname-xyz"}
    assert readings["gpu-node-1"][0].values == {dcgm.UTIL: 0.0}


def test_duplicate_series_of_one_device_merge_busy_wins_and_pods_add_up() -> None:
    one = DcgmGpu("n1", 0, "GPU-0", util=10, pod=("a", "p1"))
    two = dataclasses.replace(one, util=70, pod=("b", "p2"))
    (device,) = dcgm.node_readings(answers(one, two))["n1"]
    assert device.values[dcgm.UTIL] == 70 and {("a", "p1"), ("b", "p2")} <= device.pods


def test_a_hostname_with_a_domain_finds_its_node_when_unambiguous() -> None:
    readings = dcgm.node_readings(answers(DcgmGpu("gpu-1.ec2.internal", 0, "GPU-0"), DcgmGpu("x.a", 0, "GPU-1")))
    resolved = dcgm.resolve_nodes(readings, ["gpu-1", "x.b", "x.c"])
    assert set(resolved) == {"gpu-1"}


# --- whole GPUs -----------------------------------------------------------------------------------


def test_whole_gpus_pair_by_device_index_and_a_missing_one_shifts_nothing() -> None:
    node = host("h100-notready")
    gpus = [DcgmGpu(node.name, i, f"GPU-{i}", util=10 * i, temp=40 + i, power=100 + i) for i in range(8) if i != 2]
    facts = merged(node, *gpus)
    by_index = {f.index: f for f in facts.values()}
    assert [by_index[i].utilization_pct for i in range(8)] == [0, 10, None, 30, 40, 50, 60, 70]
    assert by_index[5].temperature_c == 45 and by_index[5].power_w == 105 and by_index[5].memory_used_mb == 0
    assert by_index[2].temperature_c is None and by_index[2].health == HEALTH_OK


def test_gpus_with_real_nvidia_uuids_pair_by_uuid_whatever_the_index() -> None:
    facts = tuple(GpuFact(uuid=f"GPU-{c}", index=i, model="H100") for i, c in enumerate("abcd"))
    node = HostFact(name="dra-node", gpus=facts)
    gpus = [DcgmGpu("dra-node", i, f"GPU-{c}", util=i + 1) for i, c in enumerate("dcba")]
    out = merged(node, *gpus)
    assert {u: f.utilization_pct for u, f in out.items()} == {"GPU-a": 4, "GPU-b": 3, "GPU-c": 2, "GPU-d": 1}


def test_a_gpu_known_by_its_uuid_is_never_paired_by_guess_and_a_mig_parent_reads_its_own_series() -> None:
    facts = (GpuFact(uuid="GPU-gone", index=0, model="A100"), GpuFact(uuid="GPU-mig", index=1, model="A100"),
             GpuFact(uuid="MIG-1", index=2, model="A100 MIG 1g.10gb", mig_profile="1g.10gb", parent_uuid="GPU-mig"))
    gpus = [DcgmGpu("n", 0, "GPU-other", util=50),  # a GPU discovery does not know: nobody's
            DcgmGpu("n", 1, "GPU-mig", util=None, temp=66),
            DcgmGpu("n", 1, "GPU-mig", util=None, temp=None, fb_used=512, gr_engine_active=0.25, instance=3,
                    profile="1g.10gb")]
    out = merged(HostFact(name="n", gpus=facts), *gpus)
    assert (out["GPU-gone"].utilization_pct, out["GPU-gone"].temperature_c) == (None, None)
    assert (out["GPU-mig"].utilization_pct, out["GPU-mig"].temperature_c) == (None, 66)
    assert (out["MIG-1"].utilization_pct, out["MIG-1"].memory_used_mb, out["MIG-1"].temperature_c) == (25.0, 512, 66)


def test_a_lease_pod_gets_the_devices_dcgm_maps_it_to_and_free_gpus_the_rest() -> None:
    node = host("h100-notready")
    uuids = [g.uuid for g in node.gpus]
    pod = make_pod("gpupool-l1", node.name, 2, namespace="gpupool-jobs", lease="l1")
    pod["metadata"]["annotations"] = {"gpupool.io/gpus": f"{uuids[0]},{uuids[1]}"}
    # The device plugin gave the pod physical GPUs 5 and 6: those are busy, 0 and 1 idle.
    gpus = [DcgmGpu(node.name, i, f"GPU-{i}", util=90 if i in (5, 6) else 0,
                    pod=("gpupool-jobs", "gpupool-l1") if i in (5, 6) else None) for i in range(8)]
    out = merged(node, *gpus, pods=[pod])
    assert out[uuids[0]].utilization_pct == 90 and out[uuids[1]].utilization_pct == 90
    assert [out[u].utilization_pct for u in uuids[2:]] == [0, 0, 0, 0, 0, 0]


def test_a_lease_pod_without_dcgm_pod_mapping_falls_back_to_the_index() -> None:
    node = host("h100-notready")
    uuids = [g.uuid for g in node.gpus]
    pod = make_pod("gpupool-l1", node.name, 1, namespace="gpupool-jobs", lease="l1")
    pod["metadata"]["annotations"] = {"gpupool.io/gpus": uuids[3]}
    out = merged(node, *[DcgmGpu(node.name, i, f"GPU-{i}", util=i) for i in range(8)], pods=[pod])
    assert out[uuids[3]].utilization_pct == 3


# --- MIG and time-slicing -----------------------------------------------------------------------


def mig_node_series(name: str) -> list[DcgmGpu]:
    """gpu-a100-mig: GPUs 0 and 1 whole, 2 and 3 in MIG mode (six 1g.10gb, four 2g.20gb)."""
    series = [DcgmGpu(name, 0, "GPU-w0", util=11, temp=41), DcgmGpu(name, 1, "GPU-w1", util=12, temp=42)]
    for gpu, uuid in ((2, "GPU-m2"), (3, "GPU-m3")):
        # Device-wide values on the parent; per-instance memory and engine activity.
        series.append(DcgmGpu(name, gpu, uuid, util=None, fb_used=None, fb_free=None, temp=50 + gpu, power=200.0))
    for n in range(6):
        series.append(DcgmGpu(name, 2 + n // 3, f"GPU-m{2 + n // 3}", util=None, fb_used=1000 + n, fb_free=9000,
                              temp=None, power=None, xid=None, row_remap_failure=None, gr_engine_active=n / 10,
                              instance=9 - n % 3, profile="1g.10gb"))
    for n in range(4):
        series.append(DcgmGpu(name, 3, "GPU-m3", util=None, fb_used=2000 + n, fb_free=18000, temp=None, power=None,
                              xid=None, row_remap_failure=None, gr_engine_active=0.5, instance=1 + n,
                              profile="2g.20gb"))
    return series


def test_mig_instances_pair_with_slices_of_their_profile_and_whole_gpus_skip_mig_parents() -> None:
    node = host("a100-mig-mixed")
    out = merged(node, *mig_node_series(node.name))
    whole = sorted((f for f in out.values() if not f.mig_profile), key=lambda f: f.index)
    assert [(f.utilization_pct, f.temperature_c) for f in whole] == [(11, 41), (12, 42)]
    small = sorted((f for f in out.values() if f.mig_profile == "1g.10gb"), key=lambda f: f.index)
    assert [f.memory_used_mb for f in small] == [1002, 1001, 1000, 1005, 1004, 1003]  # by (gpu, GPU_I_ID)
    assert [f.utilization_pct for f in small] == [20.0, 10.0, 0.0, 50.0, 40.0, 30.0]  # GR_ENGINE_ACTIVE x 100
    assert [f.temperature_c for f in small] == [52, 52, 52, 53, 53, 53]  # the parent's, device-wide
    large = [f for f in out.values() if f.mig_profile == "2g.20gb"]
    assert sorted(f.memory_used_mb or 0 for f in large) == [2000, 2001, 2002, 2003]
    assert {f.power_w for f in large} == {200.0}


def test_time_sliced_replicas_read_their_physical_gpu() -> None:
    node = host("t4-timeslicing")  # 2 T4s, 4 replicas each
    out = merged(node, DcgmGpu(node.name, 0, "GPU-t0", util=5), DcgmGpu(node.name, 1, "GPU-t1", util=80))
    by_index = sorted(out.values(), key=lambda f: f.index)
    assert [f.utilization_pct for f in by_index] == [5, 5, 5, 5, 80, 80, 80, 80]


# --- health and memory ----------------------------------------------------------------------------


@pytest.mark.parametrize(("xid", "ecc", "remap", "reason"), [
    (79, None, 0, "XID 79 reported by DCGM"),
    (0, 2, 0, "2 uncorrected ECC error(s) since the driver loaded (DCGM)"),
    (0, None, 1, "row remapping failed (DCGM)"),
    (13, None, 0, ""),  # an application's own fault: the GPU stays healthy
    (0, 0, 0, ""),
])
def test_xid_ecc_and_row_remap_failures_make_the_gpu_unhealthy(xid: int, ecc: int | None, remap: int,
                                                               reason: str) -> None:
    fact = GpuFact(uuid="GPU-a", index=0, model="H100")
    out = merged(HostFact(name="n", gpus=(fact,)), DcgmGpu("n", 0, "GPU-a", xid=xid, ecc_dbe=ecc,
                                                           row_remap_failure=remap))
    assert (out["GPU-a"].health, out["GPU-a"].health_reason) == (HEALTH_UNHEALTHY if reason else HEALTH_OK, reason)


def test_a_reason_the_device_plugin_gave_is_kept_beside_dcgms_and_extra_xids_can_be_ignored() -> None:
    fact = GpuFact(uuid="GPU-a", index=0, model="H100", health=HEALTH_UNHEALTHY, health_reason="not allocatable")
    match = dcgm.Match(dcgm.Device("n", 0, "GPU-a", values={dcgm.XID: 94.0}))
    assert dcgm.apply_reading(fact, match).health_reason == "not allocatable; XID 94 reported by DCGM"
    healthy = dataclasses.replace(fact, health=HEALTH_OK, health_reason="")
    assert dcgm.apply_reading(healthy, match, ignore_xids=frozenset({94})).health == HEALTH_OK


def test_memory_used_comes_from_fb_free_when_fb_used_is_not_exported() -> None:
    fact = GpuFact(uuid="GPU-a", index=0, model="H100", memory_mb=81_559)
    out = merged(HostFact(name="n", gpus=(fact,)), DcgmGpu("n", 0, "GPU-a", fb_used=None, fb_free=61_559))
    assert out["GPU-a"].memory_used_mb == 20_000


def test_hosts_that_failed_or_have_no_series_are_left_as_they_are() -> None:
    failed = HostFact(name="down", error="cannot read node")
    quiet = host("gke-t4")
    out = merge_telemetry([failed, quiet], answers(DcgmGpu("elsewhere", 0, "GPU-0")), [])
    assert out == (failed, quiet)
