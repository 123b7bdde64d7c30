"""The Dynamic Resource Allocation calls of a Kubernetes source: which of its nodes' GPUs the
NVIDIA DRA driver publishes (ResourceSlices) and who holds them (ResourceClaims); the lease's own
claim created, adopted and deleted. Bounded and retried like every call (`agents.k8s_api`).

`device_binding` (the source's config) decides whether slices are read at all:
* `device_plugin`: never; every node is bound by count through the device plugin.
* `auto` (default): where the cluster serves `resource.k8s.io/v1` and slices of driver
  `gpu.nvidia.com` exist; else silently the device plugin (a cluster without the group answers
  404, one whose RBAC does not let us read slices 403: both mean "no DRA here").
* `dra`: the cluster must serve them; if it does not, discovery fails with a sentence that says
  so, rather than binding by count behind the user's back.
A transient failure reading slices fails the discovery (the hosts keep their GPUs as they were):
falling back to the device plugin for one pass would swap every GPU's uuid and lose its leases.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agents.base import AgentError
from agents.k8s_api import KubeApi, Refused
from agents.k8s_dra import BINDING_AUTO, BINDING_DEVICE_PLUGIN, BINDING_DRA, DRA_DRIVER, DraInventory, dra_inventory
from agents.k8s_pod_manifest import labelled_for

#: `KubernetesConnector._list`: every item of a list call, page by page.
Lister = Callable[..., list[dict[str, Any]]]


class DraCalls:
    """The DRA side of one source's API (`api`), listing through `list_items`."""

    def __init__(self, api: KubeApi, list_items: Lister, mode: str = BINDING_AUTO) -> None:
        self.api = api
        self.list_items = list_items
        self.mode = mode

    def inventory(self) -> DraInventory | None:
        """The GPUs the slices name per node, or None where pods are bound by count (see the
        module's doc). Raises AgentError when the slices or claims cannot be read (or, with
        `dra`, when the cluster has no DRA)."""
        if self.mode == BINDING_DEVICE_PLUGIN:
            return None
        try:
            slices = self.list_items(
                f"cannot list ResourceSlices from {self.api.where}",
                "list_resource_slice",
                field_selector=f"spec.driver={DRA_DRIVER}",
            )
        except Refused as exc:  # 404: the group (or its v1) is not served
            if self.mode == BINDING_DRA:
                raise AgentError(
                    f"device_binding is 'dra' but {self.api.where} does not serve "
                    f"resource.k8s.io/v1 (Dynamic Resource Allocation, GA from Kubernetes 1.34): "
                    f"{exc.message}",
                    permanent=True,
                ) from None
            return None
        except AgentError as exc:
            if exc.permanent and self.mode == BINDING_AUTO:
                return None  # not allowed to read slices: bound by count, as before DRA
            raise
        # Servers may ignore field selectors: filter the same way here.
        slices = [s for s in slices if (s.get("spec") or {}).get("driver") == DRA_DRIVER]
        if not slices:
            if self.mode == BINDING_DRA:
                raise AgentError(
                    f"device_binding is 'dra' but no ResourceSlice of driver {DRA_DRIVER} exists "
                    f"in {self.api.where} (is NVIDIA's DRA driver for GPUs installed?)",
                    permanent=True,
                )
            return None
        claims = self.list_items(
            f"cannot list ResourceClaims from {self.api.where}",
            "list_resource_claim_for_all_namespaces",
        )
        return dra_inventory(slices, claims)

    def create_or_adopt_claim(self, namespace: str, claim: Mapping[str, Any], lease_id: str) -> dict[str, Any]:
        """Create the lease's claim, or adopt ours that an earlier try created (409)."""
        return self.api.create_or_adopt(
            "ResourceClaim", namespace, claim,
            create="create_namespaced_resource_claim", read="read_namespaced_resource_claim",
            ours=lambda existing: labelled_for(existing, lease_id), owner=f"lease {lease_id}",
        )  # fmt: skip

    def delete_claim_if_ours(self, namespace: str, name: str, lease_id: str) -> None:
        """Delete the lease's claim if it exists and is ours (a failed bind cleaning up after a
        create that may have happened after all); someone else's of that name stays."""
        what = f"cannot read ResourceClaim {namespace}/{name}"
        try:
            existing = self.api.call(what, "read_namespaced_resource_claim", name, namespace)
        except Refused:
            return
        if labelled_for(existing, lease_id):
            self.delete_claim(namespace, name)

    def delete_claim(self, namespace: str, name: str) -> None:
        """Delete a claim; one that is already gone counts as done. While a pod still uses it,
        Kubernetes keeps it (a finalizer) until the pod is gone, then removes it."""
        what = f"cannot delete ResourceClaim {namespace}/{name}"
        try:
            self.api.call(what, "delete_namespaced_resource_claim", name, namespace)
        except Refused as exc:
            if exc.status != 404:
                raise AgentError(f"{what}: {exc.message}", permanent=True) from None
