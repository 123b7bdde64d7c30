"""Dynamic Resource Allocation (`resource.k8s.io/v1`, GA in Kubernetes 1.34): NVIDIA GPUs as the
DRA driver publishes them in ResourceSlices, and the devices ResourceClaims hold. Pure functions
over API JSON, no I/O (the calls are `agents.k8s_dra_api`).

Why bother when the device plugin already counts GPUs: a ResourceSlice names every device with
its real NVIDIA UUID (`GPU-…`, MIG devices `MIG-…` with their parent's), product name, memory
and MIG profile, and a ResourceClaim can ask for exactly those devices. So on a DRA node the
lease's GPU uuids are the devices the pod gets (device-exact); on the device-plugin path the pod
gets *some* N GPUs of the node, picked by the plugin (count-exact, not device-exact).

What the NVIDIA driver (`gpu.nvidia.com`) publishes per device, as read here:
* `name`: `gpu-<minor>`, MIG devices `gpu-<minor>-mig-<gi profile>-<start>-<size>`;
* `attributes` (each a one-key object, `{"string": …}`, `{"version": …}`, `{"int": …}`):
  `type` (`gpu`, `mig`; `vfio` passthrough devices are not ours to lease), `uuid`,
  `productName`, `driverVersion`, `cudaDriverVersion`, MIG: `profile`, `parentUUID`; older
  driver versions also `index` and `minor`;
* `capacity.memory.value`: a quantity (`80Gi`, `81559Mi`, or bytes);
* `taints` (when the cluster tracks device health that way): a NoSchedule/NoExecute taint
  makes the GPU unhealthy.
Slices of a pool older than its newest `pool.generation` are stale and ignored (API rule).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from agents.base import HEALTH_OK, HEALTH_UNHEALTHY, GpuFact, GpuProcess, HostFact
from agents.k8s_nodes import NO_PLUGIN_GPUS_ERROR
from agents.k8s_resources import LEASE_LABEL, UUID_PREFIX
from agents.k8s_topology import attribute_island, with_islands

#: The NVIDIA DRA driver's name: `spec.driver` of its slices, the attribute domain in CEL.
DRA_DRIVER = "gpu.nvidia.com"
#: DeviceClasses the driver installs: whole GPUs and MIG devices.
GPU_DEVICE_CLASS = "gpu.nvidia.com"
MIG_DEVICE_CLASS = "mig.nvidia.com"

#: `sources[].device_binding` values.
BINDING_AUTO = "auto"
BINDING_DRA = "dra"
BINDING_DEVICE_PLUGIN = "device_plugin"
DEVICE_BINDINGS = (BINDING_AUTO, BINDING_DRA, BINDING_DEVICE_PLUGIN)
#: Host label saying which path binds pods on that node: `dra` or `device_plugin`.
DEVICE_BINDING_LABEL = "gpupool.io/device-binding"

_ATTRIBUTE_KINDS = ("string", "version", "int", "bool")  # a DeviceAttribute has exactly one
_TAINT_EFFECTS_UNHEALTHY = frozenset({"NoSchedule", "NoExecute"})
_NUMBER_RE = re.compile(r"(\d+)")
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_QUANTITY_FACTORS: dict[str, Decimal] = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip


@dataclass(frozen=True)
class DraInventory:
    """What the slices and claims of one cluster say, per node: the GPUs (real uuids) and the
    driver and CUDA versions the driver reports."""

    gpus: Mapping[str, tuple[GpuFact, ...]] = field(default_factory=dict)
    versions: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def validate_device_binding(value: Any) -> list[str]:
    """The problem with a source's `device_binding`, in words (none when it is fine)."""
    if value in DEVICE_BINDINGS:
        return []
    return [f"'device_binding' must be one of {', '.join(DEVICE_BINDINGS)}, got {value!r}"]


def is_dra_uuid(uuid: str) -> bool:
    """True for a uuid read from a ResourceSlice (a real NVIDIA one), False for the synthetic
    `k8s-…` ones of the device-plugin path. Decides how a lease's pod gets its GPUs."""
    return not uuid.startswith(UUID_PREFIX)


def device_class_for(uuid: str) -> str:
    """The DeviceClass that holds the device `uuid`: MIG devices are `mig.nvidia.com`."""
    return MIG_DEVICE_CLASS if uuid.startswith("MIG-") else GPU_DEVICE_CLASS


def dra_inventory(slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]]) -> DraInventory:
    """The GPUs of every node the NVIDIA driver publishes slices for. A device that a claim gpupool
    did not create holds (allocated, not admin access) is someone else's: its GpuFact carries that
    claim as a process, so inventory marks exactly that GPU `foreign`."""
    holders = foreign_holders(claims)
    devices: dict[str, list[tuple[str, Mapping[str, Any]]]] = defaultdict(list)
    for slice_ in current_slices(slices):
        spec = slice_.get("spec") or {}
        if spec.get("driver") != DRA_DRIVER:
            continue
        pool = str((spec.get("pool") or {}).get("name") or "")
        for device in spec.get("devices") or []:
            node = spec.get("nodeName") or device.get("nodeName")
            if node and isinstance(device, Mapping):
                devices[str(node)].append((pool, device))
    gpus = {node: node_gpus(listed, holders) for node, listed in devices.items()}
    versions = {node: _versions(listed) for node, listed in devices.items()}
    return DraInventory(gpus={n: g for n, g in gpus.items() if g}, versions=versions)


def current_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The slices of each pool's newest generation: a driver rewriting a pool bumps the
    generation, and slices still carrying an older one describe devices that may be gone."""
    slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for slice_ in slices:
        key, generation = _pool_key(slice_)
        newest[key] = max(newest.get(key, generation), generation)
    return [s for s in slices if _pool_key(s)[1] == newest[_pool_key(s)[0]]]


def foreign_holders(claims: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(pool, device name) → "claim NS/NAME" for every NVIDIA device held by a claim that is not
    gpupool's (no `gpupool.io/lease` label)."""
    held: dict[tuple[str, str], str] = {}
    for claim in claims:
        metadata = claim.get("metadata") or {}
        if LEASE_LABEL in (metadata.get("labels") or {}):
            continue
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") != DRA_DRIVER or result.get("adminAccess"):
                continue  # admin access (monitoring) uses nothing up
            where = f"claim {metadata.get('namespace', '')}/{metadata.get('name', '')}"
            held[(str(result.get("pool", "")), str(result.get("device", "")))] = where
    return held


def node_gpus(
    devices: Sequence[tuple[str, Mapping[str, Any]]], holders: Mapping[tuple[str, str], str]
) -> tuple[GpuFact, ...]:
    """One node's devices (pool, device) as facts: each whole GPU followed by its MIG devices.

    A MIG device's parent is reported even where the driver does not publish it as a device of
    its own (it is the physical GPU; inventory counts it through its slices only)."""
    whole: dict[str, GpuFact] = {}
    slices: dict[str, list[tuple[str, GpuFact]]] = defaultdict(list)
    for pool, device in devices:
        attrs = _attributes(device)
        uuid, kind = attrs.get("uuid", ""), attrs.get("type", "")
        kind = kind or ("mig" if uuid.startswith("MIG-") else "gpu")
        if not uuid or kind not in ("gpu", "mig"):
            continue  # vfio passthrough, or a device we cannot name
        fact = _fact(device, attrs, holders.get((pool, str(device.get("name", "")))))
        if kind == "mig" and fact.parent_uuid:
            slices[fact.parent_uuid].append((str(device.get("name", "")), fact))
        else:
            whole[uuid] = fact
    for parent_uuid, members in slices.items():
        if parent_uuid not in whole:
            product = members[0][1].model.split(" MIG ")[0]
            whole[parent_uuid] = GpuFact(uuid=parent_uuid, index=_index(members[0][0], {}), model=product)
    facts: list[GpuFact] = []
    for gpu in sorted(whole.values(), key=lambda g: (g.index, g.uuid)):
        facts.append(gpu)
        members = sorted(slices.get(gpu.uuid, []), key=lambda m: _natural(m[0]))
        facts.extend(replace(f, index=i) for i, (_, f) in enumerate(members))
    return tuple(facts)


def with_dra(host: HostFact, inventory: DraInventory | None, mode: str) -> HostFact:
    """`host` (from its Node object) with the GPUs its slices name, where it has any.

    Such a node's device-plugin count is ignored (and so is its foreign-use count: foreign use is
    per device, from the claims). With `mode` `dra`, a GPU node without slices is shown with an
    error instead of being bound by count. Every host is labelled with the path in effect."""
    gpus = inventory.gpus.get(host.name, ()) if inventory else ()
    if not gpus:
        labels = {**host.labels, DEVICE_BINDING_LABEL: BINDING_DEVICE_PLUGIN}
        if mode == BINDING_DRA and (host.gpus or host.error == NO_PLUGIN_GPUS_ERROR):
            error = f"no ResourceSlice of driver {DRA_DRIVER} names GPUs of this node (device_binding: dra)"
            return replace(host, gpus=(), foreign_gpus=0, labels=labels, error=error)
        return replace(host, labels=labels)
    driver, cuda = inventory.versions.get(host.name, ("", "")) if inventory else ("", "")
    return replace(
        host,
        gpus=with_islands(gpus, host.labels),
        foreign_gpus=0,
        driver_version=host.driver_version or driver,
        cuda_version=host.cuda_version or cuda,
        labels={**host.labels, DEVICE_BINDING_LABEL: BINDING_DRA},
        error="" if host.error == NO_PLUGIN_GPUS_ERROR else host.error,
    )


def quantity_mib(value: Any) -> int | None:
    """A Kubernetes quantity of bytes (`80Gi`, `81559Mi`, `85899345920`, `1e9`) in MiB."""
    match = _QUANTITY_RE.match(str(value).strip()) if value is not None else None
    if match is None:
        return None
    try:
        number = Decimal(match[1]) * _QUANTITY_FACTORS.get(match[2] or "", Decimal(1))
    except InvalidOperation:
        return None
    return int(number / 2**20) if number > 0 else None


# --- helpers --------------------------------------------------------------------------------------


def _fact(device: Mapping[str, Any], attrs: Mapping[str, str], holder: str | None) -> GpuFact:
    memory = quantity_mib(((device.get("capacity") or {}).get("memory") or {}).get("value"))
    model = attrs.get("productName") or "NVIDIA GPU"
    parent = attrs.get("parentUUID", "")
    profile = attrs.get("profile", "") if parent else ""
    if profile:  # the device-plugin path names MIG models the same way
        model = f"{model} MIG {profile}"
    taints = [t for t in device.get("taints") or [] if t.get("effect") in _TAINT_EFFECTS_UNHEALTHY]
    return GpuFact(
        uuid=attrs["uuid"],
        index=_index(str(device.get("name", "")), attrs),
        model=model,
        memory_mb=memory,
        mig_profile=profile,
        parent_uuid=parent,
        health=HEALTH_UNHEALTHY if taints else HEALTH_OK,
        health_reason="; ".join(f"device taint {_taint_text(t)}" for t in taints),
        processes=(GpuProcess(pid=None, name=holder),) if holder else (),
        nvlink_island=attribute_island(attrs),
    )


def _attributes(device: Mapping[str, Any]) -> dict[str, str]:
    """The device's attributes as text, by their name without the driver's domain
    (`gpu.nvidia.com/uuid` and `uuid` are the same attribute)."""
    found: dict[str, str] = {}
    prefix = f"{DRA_DRIVER}/"
    for name, value in (device.get("attributes") or {}).items():
        if not isinstance(value, dict):  # API JSON: a dict (an ABC check costs 10 % of a big sync)
            continue
        for kind in _ATTRIBUTE_KINDS:
            text = value.get(kind)
            if text is not None:
                found[str(name).removeprefix(prefix)] = str(text)
                break
    return found


def _index(name: str, attrs: Mapping[str, str]) -> int:
    """The GPU's index: the driver's `index` or `minor` attribute, else the number in its
    device name (`gpu-3` → 3)."""
    for key in ("index", "minor"):
        if attrs.get(key, "").isdigit():
            return int(attrs[key])
    match = _NUMBER_RE.search(name)
    return int(match[1]) if match else 0


def _versions(devices: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[str, str]:
    """(driver version, CUDA version `major.minor`) as the first device that has them says."""
    for _, device in devices:
        attrs = _attributes(device)
        if attrs.get("driverVersion"):
            cuda = ".".join(attrs.get("cudaDriverVersion", "").split(".")[:2])
            return attrs["driverVersion"], cuda
    return "", ""


def _pool_key(slice_: Mapping[str, Any]) -> tuple[tuple[str, str], int]:
    spec = slice_.get("spec") or {}
    pool = spec.get("pool") or {}
    try:
        generation = int(pool.get("generation") or 0)
    except (TypeError, ValueError):
        generation = 0
    return (str(spec.get("driver", "")), str(pool.get("name", ""))), generation


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in _NUMBER_RE.split(name))


def _taint_text(taint: Mapping[str, Any]) -> str:
    key, value = taint.get("key", ""), taint.get("value", "")
    return f"{key}={value}:{taint.get('effect', '')}" if value else f"{key}:{taint.get('effect', '')}"
