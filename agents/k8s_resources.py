"""NVIDIA extended resources on Kubernetes: their names, the synthetic UUIDs of the units a node
advertises, and the GPUs pods hold. Pure functions over API JSON, no I/O.

The device plugin advertises GPUs as a *count* of an extended resource (`nvidia.com/gpu`, old
clusters `alpha.kubernetes.io/nvidia-gpu`; MIG mixed strategy `nvidia.com/mig-<profile>`;
time-slicing with `renameByDefault` `nvidia.com/gpu.shared`). Node objects carry **no device
UUIDs**, so every GPU gets a deterministic synthetic UUID built from the source (the cluster),
the node and the resource: `k8s-<source>:<node>-gpu-<i>`, `k8s-<source>:<node>-mig-<profile>-<i>`,
`k8s-<source>:<node>-gpu.shared-<i>`. The source is part of it because clusters built from one
template repeat node names (node pools, `ip-10-0-…` across VPCs): two clusters' `node-1` are two
hosts with two sets of GPUs. They are stable across discovery passes as long as the node
advertises the same counts, and `resource_for_uuid` maps them back to the resource a pod must ask
for. (Clusters with Dynamic Resource Allocation publish the real NVIDIA UUIDs instead.)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
LEGACY_GPU_RESOURCE = "alpha.kubernetes.io/nvidia-gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

#: Pods gpupool created carry this label; every other pod holding GPUs is foreign use.
LEASE_LABEL = "gpupool.io/lease"

UUID_PREFIX = "k8s-"
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})

_MIG_PROFILE_RE = re.compile(r"^\d+g\.\d+gb(?:\+[a-z]+)?$")


#: Node names longer than this (they may have 253 characters) are shortened with a hash in
#: synthetic UUIDs, which must fit `Gpu.uuid` (255) with the source name and the resource tag.
_NODE_IN_UUID_MAX = 150


def gpu_uuid(node_name: str, resource: str, index: int, scope: str = "") -> str:
    """The synthetic UUID of the `index`-th unit of `resource` on `node_name` of the source
    `scope` (its name; "" for the old unscoped form, kept for parsing)."""
    return f"{_uuid_node(node_name, scope)}-{_resource_tag(resource)}-{index}"


def resource_for_uuid(node_name: str, uuid: str, scope: str = "") -> str:
    """The extended resource a pod must ask for to get the GPU `uuid` on `node_name` of the
    source `scope`.

    Inverse of `gpu_uuid`. UUIDs not minted by this module (or for another node or source) map
    to plain `nvidia.com/gpu`, the resource every device plugin understands.
    """
    prefix = f"{_uuid_node(node_name, scope)}-"
    if not uuid.startswith(prefix):
        return GPU_RESOURCE
    tag, _, index = uuid[len(prefix) :].rpartition("-")
    if not index.isdigit() or not tag:
        return GPU_RESOURCE
    if tag.startswith("mig-") and _MIG_PROFILE_RE.match(tag[4:].removesuffix(".shared")):
        return f"nvidia.com/{tag}"
    if tag == "gpu.shared":
        return SHARED_GPU_RESOURCE
    return GPU_RESOURCE


def is_gpu_resource(resource: str) -> bool:
    """True for every extended resource that hands out an NVIDIA GPU or a slice of one."""
    return resource in (
        GPU_RESOURCE,
        SHARED_GPU_RESOURCE,
        LEGACY_GPU_RESOURCE,
    ) or resource.startswith(MIG_RESOURCE_PREFIX)


def parse_count(value: Any) -> int:
    """An extended-resource quantity as a whole number; garbage and negatives read as 0.

    Extended resources are integers by API rule, but a hand-edited object may carry `"2.0"`,
    `"1k"` or junk, and discovery must not crash on one odd node.
    """
    if value is None:
        return 0
    text = str(value).strip()
    multiplier = 1
    for suffix, factor in (("k", 1000), ("M", 1000**2), ("G", 1000**3)):
        if text.endswith(suffix):
            text, multiplier = text[: -len(suffix)], factor
            break
    try:
        return max(0, int(float(text) * multiplier))
    except ValueError:
        return 0


def pod_gpu_count(pod: Mapping[str, Any]) -> int:
    """GPUs (any NVIDIA GPU resource, MIG slices included) the scheduler reserves for `pod`.

    Per container the limit counts, else the request (the API forces them equal for extended
    resources). The pod's reservation is the larger of the app containers' sum (plus sidecar
    init containers, which keep running) and the largest single ordinary init container.
    """
    spec = pod.get("spec") or {}
    app_total = sum(_container_gpus(c) for c in spec.get("containers") or [])
    init_max = 0
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":  # sidecar: runs alongside the app
            app_total += _container_gpus(container)
        else:
            init_max = max(init_max, _container_gpus(container))
    return max(app_total, init_max)


def is_active_pod(pod: Mapping[str, Any]) -> bool:
    """A pod that still holds its resources: not Succeeded and not Failed."""
    return (pod.get("status") or {}).get("phase") not in TERMINATED_PHASES


def foreign_gpu_count(pods_on_node: Iterable[Mapping[str, Any]]) -> int:
    """GPUs held by active pods that gpupool did not create (no `gpupool.io/lease` label)."""
    total = 0
    for pod in pods_on_node:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if LEASE_LABEL in labels or not is_active_pod(pod):
            continue
        total += pod_gpu_count(pod)
    return total


# --- helpers ------------------------------------------------------------------------------------


def _uuid_node(node_name: str, scope: str) -> str:
    if len(node_name) > _NODE_IN_UUID_MAX:
        digest = hashlib.sha256(node_name.encode()).hexdigest()[:16]
        node_name = f"{node_name[: _NODE_IN_UUID_MAX - 17]}~{digest}"
    return f"{UUID_PREFIX}{scope}:{node_name}" if scope else f"{UUID_PREFIX}{node_name}"


def _resource_tag(resource: str) -> str:
    if resource == LEGACY_GPU_RESOURCE:
        return "gpu"  # pre-1.10 clusters; bound pods then ask for nvidia.com/gpu
    return resource.removeprefix("nvidia.com/")


def _container_gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    return sum(
        parse_count(limits.get(name, requests.get(name)))
        for name in {*limits, *requests}
        if is_gpu_resource(name)
    )
