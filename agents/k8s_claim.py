"""The ResourceClaim that names exactly a lease's devices (Dynamic Resource Allocation,
`resource.k8s.io/v1`). Pure functions over plain JSON-shaped dicts; no API calls.

One request per leased device, each asking for exactly one device of the driver's class
(`gpu.nvidia.com`, MIG devices `mig.nvidia.com`) whose `uuid` attribute is that device's:

    requests:
    - name: gpu-0
      exactly:
        deviceClassName: gpu.nvidia.com
        allocationMode: ExactCount
        count: 1
        selectors:
        - cel: {expression: 'device.attributes["gpu.nvidia.com"].uuid == "GPU-…"'}

One request per device (not one request for N devices) so that the scheduler can only satisfy
the claim with these very devices, and so that each container of the pod can be given its own
share of them (`resources.claims[].request`). The claim is named like the lease's pod, carries
the `gpupool.io/lease` label (our claims are not foreign use) and, once the pod exists, an owner
reference to it: when the pod is deleted, Kubernetes deletes the claim with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agents.base import AgentError
from agents.k8s_dra import DRA_DRIVER, device_class_for
from agents.k8s_pod_manifest import (
    LEASE_ID_ANNOTATION,
    OWNER_ANNOTATION,
    PodClaim,
    lease_label_value,
    pod_name,
)
from agents.k8s_resources import LEASE_LABEL
from agents.k8s_schema import DRA_SCHEMA_VERSIONS, validate_object

CLAIM_API_VERSION = "resource.k8s.io/v1"
# NVIDIA uuids (`GPU-<uuid>`, `MIG-<uuid>`, old drivers `MIG-GPU-<uuid>/<gi>/<ci>`): nothing that
# could end the CEL string literal they are put in.
_DEVICE_UUID_RE = re.compile(r"^(GPU|MIG)-[A-Za-z0-9][A-Za-z0-9/-]*$")


def pod_claim(lease_id: str, gpu_uuids: Sequence[str]) -> PodClaim:
    """The claim's name and its request names (`gpu-0`, `gpu-1`, … in the lease's order)."""
    return PodClaim(name=pod_name(lease_id), requests=tuple(f"gpu-{i}" for i in range(len(gpu_uuids))))


def uuid_selector(uuid: str) -> str:
    """The CEL expression that matches the one device whose `uuid` attribute is `uuid`."""
    if not _DEVICE_UUID_RE.match(uuid):
        raise AgentError(f"{uuid!r} is not an NVIDIA device uuid a ResourceClaim can name", permanent=True)
    return f'device.attributes["{DRA_DRIVER}"].uuid == "{uuid}"'


def build_claim(
    *,
    lease_id: str,
    gpu_uuids: Sequence[str],
    namespace: str,
    owner: str,
    pod: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ResourceClaim for a lease's devices; `pod` (as created, with its uid) becomes its owner."""
    if not gpu_uuids:
        raise AgentError("a ResourceClaim needs at least one leased GPU", permanent=True)
    names = pod_claim(lease_id, gpu_uuids).requests
    metadata: dict[str, Any] = {
        "name": pod_name(lease_id),
        "namespace": namespace,
        "labels": {LEASE_LABEL: lease_label_value(lease_id)},
        "annotations": {OWNER_ANNOTATION: owner, LEASE_ID_ANNOTATION: str(lease_id)},
    }
    pod_meta = (pod or {}).get("metadata") or {}
    if pod_meta.get("uid"):
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": pod_meta["name"], "uid": pod_meta["uid"]}
        ]
    requests = [
        {
            "name": name,
            "exactly": {
                "deviceClassName": device_class_for(uuid),
                "allocationMode": "ExactCount",
                "count": 1,
                "selectors": [{"cel": {"expression": uuid_selector(uuid)}}],
            },
        }
        for name, uuid in zip(names, gpu_uuids, strict=True)
    ]
    return {
        "apiVersion": CLAIM_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": requests}},
    }


def validate_claim(claim: Mapping[str, Any]) -> dict[str, Any]:
    """Check the claim against the ResourceClaim schema of the first DRA GA release and of the
    newest one we ship; its JSON-ready form."""
    return validate_object(claim, "the ResourceClaim", DRA_SCHEMA_VERSIONS)
