"""The Pod that runs a lease's workload on Kubernetes: built from the user's manifest, validated.

Pure functions over plain JSON-shaped dicts; no API calls.

The user hands us a Pod manifest; we pin it to the lease's node, give it exactly the leased GPUs,
let it past the usual GPU taint and mark it as ours. Every refusal is an
`AgentError(permanent=True)`: a bad manifest does not get better by retrying.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.base import AgentError
from agents.k8s_resources import LEASE_LABEL, is_gpu_resource, parse_count, resource_for_uuid
from agents.k8s_schema import KUBERNETES_SCHEMA_VERSION, validate_object

OWNER_ANNOTATION = "gpupool.io/owner"
LEASE_ID_ANNOTATION = "gpupool.io/lease-id"
REQUESTED_NAME_ANNOTATION = "gpupool.io/requested-name"
#: The GPUs the lease holds (comma-separated uuids): with the DCGM exporter's pod mapping, telemetry
#: learns which physical GPUs they are (agents.k8s_telemetry), which the device plugin picked.
GPUS_ANNOTATION = "gpupool.io/gpus"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

_NAME_PREFIX = "gpupool-"
_MAX_NAME = 63  # pod names end up as hostnames: keep them DNS labels, not just subdomains
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Set by the API server; a manifest copied from `kubectl get -o yaml` must not carry them over.
_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
    "generateName",
)


#: The name under which a DRA pod refers to its lease's ResourceClaim (`spec.resourceClaims`).
POD_CLAIM_REF = "gpupool-gpus"


@dataclass(frozen=True)
class PodClaim:
    """The ResourceClaim a pod gets its leased devices through: its object name, and its
    requests' names, one per leased device (`agents.k8s_claim`)."""

    name: str
    requests: tuple[str, ...]


def pod_name(lease_id: str) -> str:
    """The deterministic pod name for a lease: `gpupool-<lease id>`.

    Deterministic so that a retried create collides (409) with the first one instead of
    starting a second copy. An id that is not already a short lowercase DNS label (UUIDs and
    integers are) is slugged and gets a hash suffix, so two ids never share a name.
    """
    text = str(lease_id)
    room = _MAX_NAME - len(_NAME_PREFIX)
    if len(text) <= room and _DNS_LABEL_RE.match(text):
        return _NAME_PREFIX + text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[: room - len(digest) - 1]
    return f"{_NAME_PREFIX}{slug.rstrip('-')}-{digest}" if slug else _NAME_PREFIX + digest


def lease_label_value(lease_id: str) -> str:
    """The value of the `gpupool.io/lease` label: the lease id itself when it is a valid
    label value (UUIDs and integers are), else a stable hash of it."""
    text = str(lease_id)
    if len(text) <= 63 and _LABEL_VALUE_RE.match(text):
        return text
    return "h-" + hashlib.sha256(text.encode()).hexdigest()[:40]


def labelled_for(obj: Mapping[str, Any], lease_id: str) -> bool:
    """True when the object `obj` (API JSON) carries the `gpupool.io/lease` label of `lease_id`:
    it is ours, for this lease."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, Mapping) and labels.get(LEASE_LABEL) == lease_label_value(lease_id)


def leased_resources(host_name: str, gpu_uuids: Sequence[str], scope: str = "") -> list[str]:
    """One extended-resource name per leased GPU (`nvidia.com/gpu`, `nvidia.com/mig-…`) on
    `host_name` of the source `scope`."""
    return sorted(resource_for_uuid(host_name, uuid, scope) for uuid in gpu_uuids)


def build_pod(
    *,
    lease_id: str,
    host_name: str,
    gpu_uuids: Sequence[str],
    manifest: Any,
    namespace: str,
    owner: str,
    uuid_scope: str = "",
    claim: PodClaim | None = None,
) -> dict[str, Any]:
    """Return the Pod to create for a lease (a new dict; `manifest` is not modified).

    * name `pod_name(lease_id)`; the user's own name, if any, kept in an annotation;
    * `spec.nodeName` = `host_name` (the scheduler is bypassed: the pool already decided);
    * the leased GPUs as limits (and requests where the container sets requests): a container
      that asks for GPUs keeps its count; the remainder of the lease goes to the first asking
      container (or to the first container when none asks), so the pod holds exactly the
      leased GPUs and no leased GPU is left for another pod to take;
    * with `claim` (Dynamic Resource Allocation: the devices are named in a ResourceClaim), no
      GPU limits: the pod refers to the claim and each container gets its share of the claim's
      requests (split as above) in `resources.claims`; the pod is pinned to the node by a
      required node affinity on its name instead of `nodeName`, since only the scheduler
      allocates claims;
    * toleration for the `nvidia.com/gpu` NoSchedule taint, label `gpupool.io/lease`,
      annotations `gpupool.io/owner`, `gpupool.io/lease-id` and `gpupool.io/gpus` (the leased
      uuids); `restartPolicy` Never unless set.

    Refuses (AgentError, permanent) anything that is not a v1 Pod, has no containers, pins
    another node, asks for fractional GPUs or for more GPUs than the lease holds.
    """
    pod = _pod_copy(manifest)
    if not gpu_uuids:
        raise AgentError("a pod binding needs at least one leased GPU", permanent=True)
    spec = _checked_spec(pod, host_name)
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    metadata = _checked_metadata(pod)
    _mark_as_lease(metadata, lease_id=lease_id, namespace=namespace, owner=owner)
    metadata["annotations"][GPUS_ANNOTATION] = ",".join(gpu_uuids)
    _tolerate_gpu_taint(spec)
    if claim is None:
        spec["nodeName"] = host_name  # bypass the scheduler: the pool already decided
        _give_leased(spec, leased_resources(host_name, gpu_uuids, uuid_scope), None)
    else:
        if len(claim.requests) != len(gpu_uuids):
            raise AgentError("the ResourceClaim must name every leased GPU once", permanent=True)
        _pin_through_scheduler(spec, host_name)
        _refer_to_claim(spec, claim)
        _give_leased(spec, list(claim.requests), POD_CLAIM_REF)
    return pod


def validate_pod(pod: Mapping[str, Any], versions: Sequence[str] = (KUBERNETES_SCHEMA_VERSION,)) -> dict[str, Any]:
    """Check `pod` against the real Pod schema (strict: unknown fields are errors) of each of
    `versions`; return its JSON-ready form. Raises AgentError(permanent=True) with the schema's
    message and the path of the offending field (`agents.k8s_schema.validate_object`)."""
    return validate_object(pod, "the Pod manifest", versions)


# --- helpers ------------------------------------------------------------------------------------


def _pod_copy(manifest: Any) -> dict[str, Any]:
    """A deep copy of a v1 Pod manifest, without the status a `kubectl get` copy may carry."""
    if not isinstance(manifest, Mapping):
        raise AgentError("binding.pod must be a Pod manifest (a mapping)", permanent=True)
    kind = manifest.get("kind", "Pod")
    if kind != "Pod":
        raise AgentError(f"binding.pod must be a Pod manifest, not kind {kind!r}", permanent=True)
    api_version = manifest.get("apiVersion", "v1")
    if api_version != "v1":
        raise AgentError(f"a Pod has apiVersion v1, not {api_version!r}", permanent=True)
    pod: dict[str, Any] = copy.deepcopy(dict(manifest))
    pod.pop("status", None)
    return pod


def _checked_spec(pod: Mapping[str, Any], host_name: str) -> dict[str, Any]:
    """The pod's spec, once it has containers (all mappings) and pins no other node."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise AgentError("the Pod manifest has no spec", permanent=True)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise AgentError("the Pod manifest has no containers", permanent=True)
    if not all(isinstance(c, dict) for c in containers):
        raise AgentError("every entry of spec.containers must be a mapping", permanent=True)
    pinned = spec.get("nodeName")
    if pinned and pinned != host_name:
        raise AgentError(
            f"the Pod manifest pins node {pinned!r} but the lease is on {host_name!r}",
            permanent=True,
        )
    return spec


def _checked_metadata(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's metadata (created when absent), once it and its labels and annotations are mappings."""
    metadata = pod.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise AgentError("the Pod manifest's metadata must be a mapping", permanent=True)
    for key in ("labels", "annotations"):
        if not isinstance(metadata.get(key) or {}, Mapping):
            raise AgentError(f"the Pod manifest's metadata.{key} must be a mapping", permanent=True)
    return metadata


def _tolerate_gpu_taint(spec: dict[str, Any]) -> None:
    """Tolerate the usual GPU taint; `restartPolicy` Never unless the manifest sets one."""
    tolerations = spec.get("tolerations") or []
    if not isinstance(tolerations, list):
        raise AgentError("the Pod manifest's spec.tolerations must be a list", permanent=True)
    spec.setdefault("restartPolicy", "Never")
    if not any(_covers_gpu_taint(t) for t in tolerations):
        tolerations = [*tolerations, dict(GPU_TOLERATION)]
    spec["tolerations"] = tolerations


def _pin_through_scheduler(spec: dict[str, Any], host_name: str) -> None:
    """Pin the pod to `host_name` by a required node affinity on the node's name, not by
    `spec.nodeName`: only the scheduler allocates ResourceClaims, and a pod created with
    `nodeName` set never passes through it (kubelet would wait for the allocation forever).
    The pin is added to each of the manifest's own required terms (terms are ORed, a term's
    requirements ANDed), so the pod still goes nowhere else."""
    spec.pop("nodeName", None)  # `_checked_spec` made sure it named this node, if anything
    affinity = _mapping_at(spec, "affinity")
    node_affinity = _mapping_at(affinity, "nodeAffinity", "affinity.")
    required = _mapping_at(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", "affinity.nodeAffinity.")
    terms = required.get("nodeSelectorTerms") or [{}]
    if not isinstance(terms, list) or not all(isinstance(t, dict) for t in terms):
        raise AgentError("the Pod manifest's nodeSelectorTerms must be a list of mappings", permanent=True)
    pin = {"key": "metadata.name", "operator": "In", "values": [host_name]}
    required["nodeSelectorTerms"] = [{**t, "matchFields": [*(t.get("matchFields") or []), pin]} for t in terms]


def _mapping_at(parent: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise AgentError(f"the Pod manifest's spec.{where}{key} must be a mapping", permanent=True)
    return value


def _refer_to_claim(spec: dict[str, Any], claim: PodClaim) -> None:
    """Add the lease's ResourceClaim to the pod's `spec.resourceClaims` (the manifest may have
    claims of its own: they stay)."""
    claims = spec.get("resourceClaims") or []
    if not isinstance(claims, list) or not all(isinstance(c, Mapping) for c in claims):
        raise AgentError("the Pod manifest's spec.resourceClaims must be a list of mappings", permanent=True)
    if any(c.get("name") == POD_CLAIM_REF for c in claims):
        raise AgentError(f"the Pod manifest already has a resource claim named {POD_CLAIM_REF!r}", permanent=True)
    spec["resourceClaims"] = [*claims, {"name": POD_CLAIM_REF, "resourceClaimName": claim.name}]


def _mark_as_lease(metadata: dict[str, Any], *, lease_id: str, namespace: str, owner: str) -> None:
    """Our name, namespace, lease label and annotations; server-set fields dropped."""
    requested_name = metadata.get("name") or metadata.get("generateName") or ""
    for key in _SERVER_METADATA:
        metadata.pop(key, None)
    metadata["name"] = pod_name(lease_id)
    metadata["namespace"] = namespace
    metadata["labels"] = {
        **(metadata.get("labels") or {}),
        LEASE_LABEL: lease_label_value(lease_id),
    }
    annotations = {**(metadata.get("annotations") or {})}
    annotations[OWNER_ANNOTATION] = owner
    annotations[LEASE_ID_ANNOTATION] = str(lease_id)
    if requested_name:
        annotations[REQUESTED_NAME_ANNOTATION] = str(requested_name)
    metadata["annotations"] = annotations


def _give_leased(spec: dict[str, Any], units: list[str], claim_ref: str | None) -> None:
    """Give the containers the leased `units`: extended resources as limits, or (with
    `claim_ref`, the DRA path) requests of the pod's claim as `resources.claims`."""
    _assign_gpus(spec["containers"], units, fill=True, claim_ref=claim_ref)
    for init in spec.get("initContainers") or []:
        # Init containers run one at a time before the app containers and reuse the same
        # devices: each may ask for up to the whole lease, and gets what it asked for.
        if not isinstance(init, dict):
            raise AgentError("every entry of spec.initContainers must be a mapping", permanent=True)
        _assign_gpus([init], units, fill=False, claim_ref=claim_ref)


def _covers_gpu_taint(toleration: Any) -> bool:
    if not isinstance(toleration, Mapping):
        return False
    key, operator = toleration.get("key"), toleration.get("operator", "Equal")
    effect = toleration.get("effect")
    key_ok = key == "nvidia.com/gpu" or (not key and operator == "Exists")
    return key_ok and operator == "Exists" and effect in (None, "", "NoSchedule")


def _asked_gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise AgentError("container resources must be a mapping", permanent=True)
    asked = 0
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            raise AgentError(f"container resources.{section} must be a mapping", permanent=True)
        for name, value in values.items():
            if not is_gpu_resource(str(name)):
                continue
            text = str(value).strip()
            if not text.isdigit():
                raise AgentError(
                    f"container {container.get('name', '?')!r} asks for {value!r} of {name}: "
                    "GPUs come in whole numbers",
                    permanent=True,
                )
            # limits win; requests only count where no limit is given (they must be equal)
            if section == "limits" or name not in (resources.get("limits") or {}):
                asked += parse_count(text)
    return asked


def _assign_gpus(
    containers: list[dict[str, Any]], units: list[str], *, fill: bool, claim_ref: str | None
) -> None:
    """Rewrite the GPU resources of `containers` to name the leased units.

    With `fill`, the part of the lease nobody asked for goes to the first asking container
    (or the first container), so the pod holds exactly the lease.
    """
    asks = [_asked_gpus(c) for c in containers]
    if sum(asks) > len(units):
        raise AgentError(
            f"the Pod manifest asks for {sum(asks)} GPUs but the lease holds {len(units)}",
            permanent=True,
        )
    if fill:
        first = next((i for i, n in enumerate(asks) if n), 0)
        asks[first] += len(units) - sum(asks)
    position = 0
    for container, ask in zip(containers, asks, strict=True):
        _give_container(container, units[position : position + ask], claim_ref)
        position += ask


def _give_container(container: dict[str, Any], mine: list[str], claim_ref: str | None) -> None:
    """Replace the container's GPU limits (and requests) by `mine`, counted per resource; or,
    with `claim_ref`, drop them for one `resources.claims` entry per unit (a request of the
    pod's claim: exactly that device)."""
    resources = dict(container.get("resources") or {})
    limits = {k: v for k, v in (resources.get("limits") or {}).items() if not is_gpu_resource(k)}
    requests = resources.get("requests")
    if requests is not None:
        requests = {k: v for k, v in requests.items() if not is_gpu_resource(k)}
    if claim_ref is None:
        for resource in mine:
            limits[resource] = str(int(limits.get(resource, 0)) + 1)
            if requests is not None:
                requests[resource] = limits[resource]
    elif mine:
        claims = resources.get("claims") or []
        if not isinstance(claims, list):
            raise AgentError("container resources.claims must be a list", permanent=True)
        resources["claims"] = [*claims, *({"name": claim_ref, "request": r} for r in mine)]
    if limits:
        resources["limits"] = limits
    else:
        resources.pop("limits", None)
    if requests is not None:
        resources["requests"] = requests
    if resources:
        container["resources"] = resources
