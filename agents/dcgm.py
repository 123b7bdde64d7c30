"""NVIDIA DCGM exporter series → per-GPU readings of a Kubernetes node. Pure: no I/O.

Input is what the Prometheus HTTP API answers to an instant query of one DCGM metric (the `result`
list of a `vector`): `{"metric": {labels}, "value": [t, "42"]}`. The exporter labels each series
with the node (`Hostname`; a scrape config may add `node` or `kubernetes_node`), the device
(`gpu` index, `UUID`, `device`, `pci_bus_id`, `modelName`), for a MIG GPU instance
`GPU_I_ID` and `GPU_I_PROFILE` (its `UUID` is then the parent GPU's), and with Kubernetes pod
mapping on the pod using the device (`namespace`/`pod`/`container`, renamed `exported_*` when the
scrape's own target labels took those names).

`node_readings` turns the answers into devices per node; `match_node` pairs one node's devices
with its GpuFacts (rules in docs/kubernetes-telemetry.md) and `apply_reading` writes a pairing
into a GpuFact.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.base import HEALTH_UNHEALTHY, GpuFact

UTIL = "DCGM_FI_DEV_GPU_UTIL"
#: Profiling metric (ratio 0..1): utilisation of MIG instances, where DCGM_FI_DEV_GPU_UTIL is
#: not supported, and of GPUs whose exporter runs the DCP counter set only.
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
#: A gauge in the exporter's default counters: the last XID error the driver reported (0: none).
XID = "DCGM_FI_DEV_XID_ERRORS"
#: Off in the default counters CSV, on in many clusters' own.
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
#: In the default counters: 1 when the GPU could not remap a row of bad memory.
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"

#: Every metric read, one instant query each for the whole cluster.
METRICS = (UTIL, GR_ENGINE_ACTIVE, FB_USED, FB_FREE, TEMP, POWER, XID, ECC_DBE, ROW_REMAP_FAILURE)
#: Read from the parent GPU where a MIG instance's own series lacks them (device-wide values).
_DEVICE_WIDE = (TEMP, POWER, XID, ECC_DBE, ROW_REMAP_FAILURE)

# Plausible ranges: DCGM reports "no value" as huge sentinels (2**31 - 16, 2**63 - 16, 2**47),
# which must not read as 9.2e18 watts. Outside the range the value is dropped.
_RANGES = {
    UTIL: (0.0, 100.0), GR_ENGINE_ACTIVE: (0.0, 1.0), FB_USED: (0.0, 1e8), FB_FREE: (0.0, 1e8),
    TEMP: (-60.0, 250.0), POWER: (0.0, 1e5), XID: (0.0, 1e6), ECC_DBE: (0.0, 1e12), ROW_REMAP_FAILURE: (0.0, 1.0),
}

#: XIDs caused by the application, not the GPU (the NVIDIA device plugin's own list): a job that
#: crashed leaves the GPU healthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

#: How a real NVIDIA GPU UUID starts (synthetic Kubernetes ones start `k8s-`).
NVIDIA_UUID_PREFIX = "GPU-"

#: Node labels, in order of trust: a scrape config's relabelled node name, then the exporter's.
NODE_LABELS = ("node", "kubernetes_node", "Hostname")
_POD_LABELS = (("exported_namespace", "exported_pod"), ("namespace", "pod"))
#: What tells one series' device (and pod) from another's.
_IDENTITY_LABELS = (*NODE_LABELS, "UUID", "gpu", "GPU_I_ID", "GPU_I_PROFILE",
                    *(k for pair in _POD_LABELS for k in pair))


@dataclass
class Device:
    """One GPU, or one MIG GPU instance (`instance` set), on one node, with its latest values
    (metric name → value) and the pods the exporter says use it ((namespace, name))."""

    node: str
    gpu: int | None
    uuid: str
    instance: int | None = None
    profile: str = ""
    values: dict[str, float] = field(default_factory=dict)
    pods: set[tuple[str, str]] = field(default_factory=set)

    @property
    def physical(self) -> str:
        """Which physical GPU it is (or lives on): its UUID, else its index."""
        return self.uuid or f"#{self.gpu}"

    def order(self) -> tuple[int, int, str]:
        return (-1 if self.gpu is None else self.gpu, -1 if self.instance is None else self.instance, self.uuid)


# --- parsing ------------------------------------------------------------------------------------


def sample_value(sample: Mapping[str, Any]) -> float | None:
    """The value of one instant-vector sample (`"value": [t, "42"]`); None for NaN, ±Inf and
    anything that is not a number."""
    value = sample.get("value")
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def node_readings(answers: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[Device]]:
    """Node name → its devices, from each metric's instant-query result.

    Series without a node or without a device (neither `UUID` nor `gpu`) are skipped; so are
    values that are not finite or outside the metric's plausible range. Several series of one
    device (two Prometheus replicas, one series per pod on a time-sliced GPU) merge: the highest
    value wins (busy rather than idle, an error count rather than none) and the pods add up.
    """
    devices: dict[tuple[str, str, int | None], Device] = {}
    # The device of each distinct set of identifying labels, parsed once: a cluster's answers
    # hold every device once per metric (tens of thousands of series).
    seen: dict[tuple[Any, ...], Device | None] = {}
    for metric, samples in answers.items():
        low, high = _RANGES.get(metric, (-math.inf, math.inf))
        for sample in samples:
            labels = sample.get("metric")
            if not isinstance(labels, dict):  # JSON objects: a dict check is cheaper than Mapping's
                continue
            ident = tuple(map(labels.get, _IDENTITY_LABELS))
            if ident not in seen:
                seen[ident] = _known_device(labels, devices)
            known = seen[ident]
            if known is None:
                continue
            value = sample_value(sample)
            if value is not None and low <= value <= high:
                known.values[metric] = max(value, known.values.get(metric, value))
    by_node: dict[str, list[Device]] = defaultdict(list)
    for device in devices.values():
        by_node[device.node].append(device)
    return dict(by_node)


def _known_device(labels: Mapping[str, Any], devices: dict[tuple[str, str, int | None], Device]) -> Device | None:
    """The device these labels name (the one already in `devices` if any), with their pod."""
    device = _device(labels)
    if device is None:
        return None
    known = devices.setdefault((device.node, device.physical, device.instance), device)
    for namespace_key, pod_key in _POD_LABELS:
        if labels.get(pod_key):
            known.pods.add((str(labels.get(namespace_key) or ""), str(labels[pod_key])))
            break
    return known


def _device(labels: Mapping[str, Any]) -> Device | None:
    node = next((str(labels[k]) for k in NODE_LABELS if labels.get(k)), "")
    uuid = str(labels.get("UUID") or "")
    gpu = _int(labels.get("gpu"))
    if not node or (not uuid and gpu is None):
        return None
    instance = _int(labels.get("GPU_I_ID"))
    profile = str(labels.get("GPU_I_PROFILE") or "")
    if instance is None and profile:
        instance = 0  # a profile without an instance id: still an instance, not the whole GPU
    return Device(node=node, gpu=gpu, uuid=uuid, instance=instance, profile=profile)


def _int(value: Any) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() else None


def resolve_nodes(readings: Mapping[str, list[Device]], node_names: Iterable[str]) -> dict[str, list[Device]]:
    """`readings` keyed by the cluster's node names: exact names first, then a host name that
    differs only by its domain (`gpu-1` vs `gpu-1.example.internal`) where exactly one node has
    that first label. Devices of other names are dropped."""
    names = set(node_names)
    short: dict[str, list[str]] = defaultdict(list)
    for name in names:
        short[name.split(".")[0]].append(name)
    out: dict[str, list[Device]] = defaultdict(list)
    for reported, devices in readings.items():
        if reported in names:
            out[reported].extend(devices)
            continue
        candidates = short.get(reported.split(".")[0], [])
        if len(candidates) == 1:
            out[candidates[0]].extend(devices)
    return dict(out)


# --- matching -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """The device a GpuFact reads from, and for a MIG instance its parent GPU (device-wide values)."""

    device: Device
    parent: Device | None = None


def match_node(facts: Sequence[GpuFact], devices: Sequence[Device],
               pod_gpus: Mapping[tuple[str, str], Sequence[str]]) -> dict[str, Match]:
    """GpuFact uuid → its device, for one node. Rules, first match wins:

    1. A fact with a real NVIDIA UUID (`GPU-…`): the device with that `UUID` (a GPU in MIG mode
       included: its device-wide values), or none; a MIG fact whose
       parent (`parent_uuid`, else `physical_uuid`) is known: that GPU's instances of its profile.
    2. A fact a gpupool pod holds (`pod_gpus`: (namespace, pod) → the uuids its lease holds):
       the devices DCGM says that pod uses, by profile. Exact, where the exporter maps pods.
    3. MIG facts: the node's remaining instances of the same profile, both in order.
    4. Whole GPUs without a real UUID: the remaining non-MIG devices, `gpu` index = fact index
       first, then in order.
       The device plugin, not gpupool, picks a pod's devices, so for a GPU no pod attributes
       this is a guess that keeps counts right (how many GPUs of the node are busy, unhealthy).
       Time-sliced replicas count as one physical GPU per `shared_replicas` of them.
    """
    pairing = _Pairing(facts, devices)
    pairing.by_uuid()
    pairing.by_pod(pod_gpus)
    pairing.mig_in_order()
    pairing.whole_by_index()
    return {uuid: Match(d, pairing.parents.get(d.physical) if d.instance is not None else None)
            for uuid, d in pairing.out.items()}


class _Pairing:
    """The state of `match_node`: which fact reads which device so far."""

    def __init__(self, facts: Sequence[GpuFact], devices: Sequence[Device]) -> None:
        self.facts = facts
        self.instances = sorted((d for d in devices if d.instance is not None), key=Device.order)
        mig_parents = {d.physical for d in self.instances}
        self.parents = {d.physical: d for d in devices if d.instance is None and d.physical in mig_parents}
        self.whole = sorted((d for d in devices if d.instance is None and d.physical not in mig_parents),
                            key=Device.order)
        self.taken: set[int] = set()  # id() of devices given to one fact (time-sliced ones serve several)
        self.out: dict[str, Device] = {}

    def give(self, facts: Iterable[GpuFact], devices: Iterable[Device]) -> None:
        """Pair `facts` (by index) with the devices not taken yet (in their order)."""
        free = [d for d in devices if id(d) not in self.taken]
        for fact, device in zip(sorted(facts, key=lambda f: f.index), free, strict=False):
            self.out[fact.uuid] = device
            if fact.shared_replicas <= 1:
                self.taken.add(id(device))

    def unpaired(self) -> list[GpuFact]:
        return [f for f in self.facts if f.uuid not in self.out]

    def by_uuid(self) -> None:
        # A GPU in MIG mode reads its own series too (device-wide values: temperature, power, XID).
        whole = {d.uuid: d for d in (*self.whole, *self.parents.values()) if d.uuid}
        for fact in self.facts:
            if not fact.mig_profile and fact.uuid in whole:
                self.give([fact], [whole[fact.uuid]])
        known: dict[tuple[str, str], list[GpuFact]] = defaultdict(list)
        for fact in self.unpaired():
            parent = fact.parent_uuid or fact.physical_uuid
            if fact.mig_profile and parent:
                known[(parent, fact.mig_profile)].append(fact)
        for (parent, profile), group in known.items():
            self.give(group, (d for d in self.instances if d.uuid == parent and d.profile == profile))

    def by_pod(self, pod_gpus: Mapping[tuple[str, str], Sequence[str]]) -> None:
        waiting = {f.uuid: f for f in self.unpaired()}
        for pod, uuids in pod_gpus.items():
            held = [waiting[u] for u in uuids if u in waiting]
            used = [d for d in (*self.whole, *self.instances) if pod in d.pods]
            for profile in {f.mig_profile for f in held}:
                self.give((f for f in held if f.mig_profile == profile), (d for d in used if d.profile == profile))

    def mig_in_order(self) -> None:
        for profile in sorted({f.mig_profile for f in self.facts if f.mig_profile}):
            self.give((f for f in self.unpaired() if f.mig_profile == profile),
                      (d for d in self.instances if d.profile == profile))

    def whole_by_index(self) -> None:
        """Whole GPUs and time-sliced replicas (one physical slot per `shared_replicas` of them):
        the device of the slot's index first, the rest in order."""
        slots: dict[int, list[GpuFact]] = defaultdict(list)
        for fact in self.unpaired():
            # A GPU known by its NVIDIA UUID is that GPU or none: no guess for it.
            if not fact.mig_profile and not fact.uuid.startswith(NVIDIA_UUID_PREFIX):
                slots[fact.index // max(1, fact.shared_replicas)].append(fact)
        free = [d for d in self.whole if id(d) not in self.taken]
        by_index = {d.gpu: d for d in free if d.gpu is not None}
        left: list[int] = []
        for slot in sorted(slots):
            device = by_index.get(slot)
            if device is None:
                left.append(slot)
                continue
            self.out.update((f.uuid, device) for f in slots[slot])
            free.remove(device)
        for slot, device in zip(left, free, strict=False):
            self.out.update((f.uuid, device) for f in slots[slot])


# --- readings into facts -------------------------------------------------------------------------


def apply_reading(fact: GpuFact, match: Match | None, *, ignore_xids: frozenset[int] = APPLICATION_XIDS) -> GpuFact:
    """`fact` with the telemetry of its device (None where the device has no value) and, on a
    non-application XID, uncorrected ECC errors or a failed row remap, unhealthy with the reason
    added to any the fact already had. No match: the fact as it is, telemetry None."""
    if match is None:
        return fact
    own, parent = match.device.values, (match.parent.values if match.parent else {})

    def value(metric: str) -> float | None:
        if metric in own:
            return own[metric]
        return parent.get(metric) if metric in _DEVICE_WIDE else None

    util = value(UTIL)
    if util is None and value(GR_ENGINE_ACTIVE) is not None:
        util = round(100.0 * (value(GR_ENGINE_ACTIVE) or 0.0), 1)
    used = value(FB_USED)
    if used is None and value(FB_FREE) is not None and fact.memory_mb:
        used = max(0.0, fact.memory_mb - (value(FB_FREE) or 0.0))
    problems = _problems(value(XID), value(ECC_DBE), value(ROW_REMAP_FAILURE), ignore_xids)
    health, reason = fact.health, fact.health_reason
    if problems:
        health = HEALTH_UNHEALTHY
        reason = "; ".join(r for r in (fact.health_reason, *problems) if r)
    return dataclasses.replace(
        fact, utilization_pct=util, memory_used_mb=None if used is None else int(used),
        temperature_c=value(TEMP), power_w=value(POWER), health=health, health_reason=reason)


def _problems(xid: float | None, ecc: float | None, remap_failed: float | None,
              ignore_xids: frozenset[int]) -> list[str]:
    problems = []
    if xid and int(xid) not in ignore_xids:
        problems.append(f"XID {int(xid)} reported by DCGM")
    if ecc:
        problems.append(f"{int(ecc)} uncorrected ECC error(s) since the driver loaded (DCGM)")
    if remap_failed:
        problems.append("row remapping failed (DCGM)")
    return problems
