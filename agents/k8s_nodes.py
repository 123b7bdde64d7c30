"""Kubernetes Node objects → discovered facts. Pure functions over API JSON, no I/O.

Input is what the API server returns (`kubectl get node -o json`: camelCase keys, quantities as
strings), so the fixtures captured from real clusters parse exactly as live responses do. How
GPUs are named and counted is `agents.k8s_resources`; this module reads everything else a node
says.

Facts Kubernetes can and cannot give us:

* Node objects carry no device UUIDs: each advertised unit gets a synthetic one
  (`k8s_resources.gpu_uuid`), qualified by the source so that two clusters' same-named nodes
  are two sets of GPUs.
* Which physical GPU a MIG slice lives on is not visible either. Slices are reported with
  `mig_profile` set and `parent_uuid` **empty**: a synthetic parent would be a GPU row that can
  never be leased, and the counts would not add up.
* Model and memory come from labels: GPU Feature Discovery (`nvidia.com/gpu.product`,
  `nvidia.com/gpu.memory` in MiB, `nvidia.com/mig-<profile>.memory`), then GKE
  (`cloud.google.com/gke-accelerator`), EKS (`k8s.amazonaws.com/accelerator`) and the old
  `alpha.kubernetes.io/nvidia-gpu-name`. GFD writes names with dashes for spaces
  (`NVIDIA-H100-80GB-HBM3`); we turn them back into spaces so that a model filter like
  `H100 80GB` matches Kubernetes and SSH hosts alike. The raw label stays in `HostFact.labels`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agents.base import (
    HEALTH_OK,
    HEALTH_UNHEALTHY,
    HOST_CORDONED,
    HOST_OFFLINE,
    HOST_READY,
    GpuFact,
    HostFact,
)
from agents.k8s_resources import (
    GPU_RESOURCE,
    LEGACY_GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SHARED_GPU_RESOURCE,
    foreign_gpu_count,
    gpu_uuid,
    is_gpu_resource,
    parse_count,
)
from agents.k8s_topology import with_islands

_PRODUCT = "nvidia.com/gpu.product"
_MEMORY = "nvidia.com/gpu.memory"
_COUNT = "nvidia.com/gpu.count"
_REPLICAS = "nvidia.com/gpu.replicas"
_GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
_EKS_ACCELERATOR = "k8s.amazonaws.com/accelerator"
_LEGACY_NAME = "alpha.kubernetes.io/nvidia-gpu-name"
# Labels that say "this is a GPU node" even when the device plugin advertises nothing.
_GPU_NODE_LABELS = (_PRODUCT, _COUNT, "nvidia.com/gpu.present", _GKE_ACCELERATOR, _EKS_ACCELERATOR)

_SINGLE_MIG_PRODUCT_RE = re.compile(r"^(?P<base>.+)-MIG-(?P<profile>\d+g\.\d+gb(?:\+[a-z]+)?)$")
_PROFILE_MEMORY_RE = re.compile(r"\.(\d+)gb")
_NAME_MEMORY_RE = re.compile(r"(\d+)gb", re.IGNORECASE)
_UNKNOWN_MODEL = "NVIDIA GPU"
#: The error of a node that looks like a GPU node but whose device plugin advertises no GPU
#: (on a DRA node, its ResourceSlices may name them instead: `k8s_dra.with_dra`).
NO_PLUGIN_GPUS_ERROR = "node has GPU labels but its device plugin advertises no GPUs"

# Nominal memory (GiB) of cloud accelerators whose label carries no size. Nominal, not what
# nvidia-smi reports; hosts with GFD labels use the exact `nvidia.com/gpu.memory` instead.
_CLOUD_ACCELERATOR_GIB = {
    "k80": 12,
    "p4": 8,
    "p100": 16,
    "v100": 16,
    "t4": 16,
    "a100": 40,
    "l4": 24,
}


# --- the parser ---------------------------------------------------------------------------------


def node_to_host(
    node: Mapping[str, Any], pods_on_node: Sequence[Mapping[str, Any]], scope: str = ""
) -> HostFact:
    """Turn one Node object (API JSON) and the pods bound to it into a HostFact. `scope` is the
    source's name: it qualifies the GPUs' synthetic UUIDs (`k8s_resources.gpu_uuid`).

    * GPUs: one GpuFact per advertised unit of every NVIDIA resource in `status.capacity`
      (falling back to `allocatable`). Units beyond `allocatable` are marked unhealthy: the
      device plugin withdraws unhealthy devices from allocatable only.
    * Time-slicing (`nvidia.com/gpu.replicas` > 1, a `-SHARED` product or the `gpu.shared`
      resource): each advertised replica is a GpuFact, with `shared_replicas` set to the
      replica count so the oversubscription shows.
    * State: Ready condition not True (or missing) → offline; `spec.unschedulable` → cordoned.
    * A node that looks like a GPU node (GFD or cloud accelerator labels) but advertises no GPU
      comes back with `error` set, so it shows as offline instead of silently vanishing. A node
      with neither has no GPUs and no error; discovery skips such hosts.
    * `foreign_gpus`: GPUs held by active pods without the gpupool lease label, at most the
      node's GPU count. `pods_on_node` must already be the pods whose `spec.nodeName` is this
      node; terminated ones are ignored here too.
    """
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    name = str(metadata.get("name") or "")
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}

    gpus = with_islands(tuple(_gpu_facts(name, labels, status, scope)), labels)
    error = ""
    if not gpus and any(labels.get(key, "") not in ("", "false", "0") for key in _GPU_NODE_LABELS):
        error = NO_PLUGIN_GPUS_ERROR

    return HostFact(
        name=name,
        address=_address(status),
        state=_state(spec, status),
        driver_version=_driver_version(labels),
        cuda_version=_cuda_version(labels),
        gpus=gpus,
        foreign_gpus=min(foreign_gpu_count(pods_on_node), len(gpus)),
        labels=labels,
        taints=tuple(_taint_text(t) for t in spec.get("taints") or []),
        error=error,
    )


def _gpu_facts(
    node_name: str, labels: Mapping[str, str], status: Mapping[str, Any], scope: str
) -> Iterator[GpuFact]:
    capacity = status.get("capacity") or {}
    allocatable = status.get("allocatable") or {}
    resources = sorted(
        {r for r in (*capacity, *allocatable) if is_gpu_resource(r)},
        key=_resource_order,
    )
    # A cluster advertising both names counts its GPUs twice; the modern name wins.
    if GPU_RESOURCE in resources and LEGACY_GPU_RESOURCE in resources:
        resources.remove(LEGACY_GPU_RESOURCE)

    model, single_mig_profile = _base_model(labels)
    memory = _int_label(labels, _MEMORY) or _memory_from_name(labels)
    index = 0  # host-wide and sequential: the API gives no device index to reuse
    for resource in resources:
        total = parse_count(capacity.get(resource, allocatable.get(resource)))
        usable = parse_count(allocatable.get(resource, total))
        replicas = _replicas(labels, resource, total)
        if resource.startswith(MIG_RESOURCE_PREFIX):
            profile = resource[len(MIG_RESOURCE_PREFIX) :].removesuffix(".shared")
            unit_model = f"{model} MIG {profile}"
            unit_memory = _int_label(labels, f"{MIG_RESOURCE_PREFIX}{profile}.memory")
            unit_memory = unit_memory or _profile_memory(profile)
        else:
            profile, unit_model, unit_memory = single_mig_profile, model, memory
            if profile:
                unit_model = f"{model} MIG {profile}"
                unit_memory = _int_label(labels, _MEMORY) or _profile_memory(profile)
        for i in range(total):
            healthy = i < usable
            yield GpuFact(
                uuid=gpu_uuid(node_name, resource, i, scope),
                index=index,
                model=unit_model,
                memory_mb=unit_memory,
                mig_profile=profile,
                health=HEALTH_OK if healthy else HEALTH_UNHEALTHY,
                health_reason="" if healthy else "device plugin does not report it allocatable",
                shared_replicas=replicas,
            )
            index += 1


def _resource_order(resource: str) -> tuple[int, str]:
    rank = {GPU_RESOURCE: 0, LEGACY_GPU_RESOURCE: 0, SHARED_GPU_RESOURCE: 1}
    return rank.get(resource, 2), resource


def _base_model(labels: Mapping[str, str]) -> tuple[str, str]:
    """(model, MIG profile of the single strategy or "")."""
    product = labels.get(_PRODUCT, "").strip()
    if product:
        product = product.removesuffix("-SHARED")
        profile = ""
        match = _SINGLE_MIG_PRODUCT_RE.match(product)
        if match:
            product, profile = match["base"], match["profile"]
        return product.replace("-", " ").replace("_", " "), profile
    for key in (_GKE_ACCELERATOR, _EKS_ACCELERATOR):
        if labels.get(key):
            return _cloud_model(labels[key]), ""
    if labels.get(_LEGACY_NAME):
        return labels[_LEGACY_NAME].replace("-", " ").replace("_", " "), ""
    return _UNKNOWN_MODEL, ""


def _cloud_model(accelerator: str) -> str:
    # "nvidia-tesla-t4" → "NVIDIA Tesla T4", "nvidia-h100-80gb" → "NVIDIA H100 80GB"
    words = []
    for word in accelerator.split("-"):
        lowered = word.lower()
        words.append({"nvidia": "NVIDIA", "tesla": "Tesla"}.get(lowered, word.upper()))
    return " ".join(words)


def _memory_from_name(labels: Mapping[str, str]) -> int | None:
    for key in (_GKE_ACCELERATOR, _EKS_ACCELERATOR, _LEGACY_NAME):
        name = labels.get(key, "").lower()
        if not name:
            continue
        match = _NAME_MEMORY_RE.search(name)
        if match:
            return int(match[1]) * 1024
        for chip, gib in _CLOUD_ACCELERATOR_GIB.items():
            if re.search(rf"(^|-){chip}($|-)", name):
                return gib * 1024
    return None


def _profile_memory(profile: str) -> int | None:
    match = _PROFILE_MEMORY_RE.search(profile)
    return int(match[1]) * 1024 if match else None


def _replicas(labels: Mapping[str, str], resource: str, total: int) -> int:
    replicas = _int_label(labels, _REPLICAS) or 1
    if replicas > 1:
        return replicas
    shared = resource.endswith(".shared") or labels.get(_PRODUCT, "").endswith("-SHARED")
    if not shared:
        return 1
    physical = _int_label(labels, _COUNT) or 0
    # Shared but the replica count is not labelled: infer it from advertised ÷ physical.
    return max(2, total // physical) if physical else 2


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    value = labels.get(key, "").strip()
    return int(value) if value.isdigit() else None


def _version_from_parts(labels: Mapping[str, str], prefix: str, parts: Sequence[str]) -> str:
    # Only a leading run of parts counts: "550..07" would be worse than "550".
    leading: list[str] = []
    for part in parts:
        value = labels.get(f"{prefix}.{part}", "").strip()
        if not value:
            break
        leading.append(value)
    return ".".join(leading)


def _driver_version(labels: Mapping[str, str]) -> str:
    return (
        labels.get("nvidia.com/cuda.driver-version.full", "").strip()
        or _version_from_parts(
            labels, "nvidia.com/cuda.driver-version", ("major", "minor", "revision")
        )
        or _version_from_parts(labels, "nvidia.com/cuda.driver", ("major", "minor", "rev"))
    )


def _cuda_version(labels: Mapping[str, str]) -> str:
    return (
        labels.get("nvidia.com/cuda.runtime-version.full", "").strip()
        or _version_from_parts(labels, "nvidia.com/cuda.runtime-version", ("major", "minor"))
        or _version_from_parts(labels, "nvidia.com/cuda.runtime", ("major", "minor"))
    )


def _state(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    ready = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    if ready is None or ready.get("status") != "True":
        return HOST_OFFLINE
    if spec.get("unschedulable"):
        return HOST_CORDONED
    return HOST_READY


def _address(status: Mapping[str, Any]) -> str:
    addresses = status.get("addresses") or []
    for wanted in ("InternalIP", "ExternalIP", "Hostname"):
        for address in addresses:
            if address.get("type") == wanted and address.get("address"):
                return str(address["address"])
    return ""


def _taint_text(taint: Mapping[str, Any]) -> str:
    key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
    text = f"{key}={value}" if value else str(key)
    return f"{text}:{effect}" if effect else text
