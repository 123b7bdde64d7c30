"""The Dynamic Resource Allocation part of the Kubernetes test server (`resource.k8s.io/v1`).

Mixed into `KubeApiServer`. Served, as a 1.34+ API server does:
    GET  /apis/resource.k8s.io/v1                                  (APIResourceList)
    GET  /apis/resource.k8s.io/v1/resourceslices[/{name}]          (cluster-scoped; fieldSelector
                                                                    spec.driver / spec.nodeName)
    GET  /apis/resource.k8s.io/v1/resourceclaims                   (all namespaces)
    GET  POST   /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims
    GET  DELETE /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}
`serve_dra = False` makes it a cluster without DRA (1.33 and older, or the group turned off):
every one of these answers 404, as the real API server does for a group it does not serve.

No scheduler runs here: a test allocates a claim with `allocate_claim`, which picks, for each
request, the published device its CEL selector names by uuid (the one form gpupool writes), or
the devices the test names; foreign claims come in already allocated through `add_claim`.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

GROUP = "resource.k8s.io"
VERSION = f"{GROUP}/v1"
_UUID_SELECTOR_RE = re.compile(r'^device\.attributes\["([^"]+)"\]\.uuid == "([^"]+)"$')


@dataclass
class DraRoutes:
    """ResourceSlices and ResourceClaims, and the hooks tests use for them."""

    serve_dra: bool = True
    resource_slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    resource_claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # Shared with (and declared again by) KubeApiServer.
    namespaces: set[str] | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    if TYPE_CHECKING:  # provided by KubeApiServer

        def _stamp(self, obj: dict[str, Any]) -> None: ...
        def _list(self, kind: str, items: list[dict[str, Any]], query: dict[str, str],
                  api_version: str = "v1") -> dict[str, Any]: ...  # fmt: skip

    # --- hooks for tests ------------------------------------------------------------------------

    def load_slices(self, source: str | Path | dict[str, Any] | list[dict[str, Any]]) -> None:
        """Publish ResourceSlices from a `kind: List` JSON file or object, or a list of them."""
        data = json.loads(Path(source).read_text()) if isinstance(source, str | Path) else source
        items = data.get("items", [data]) if isinstance(data, dict) else data
        with self._lock:
            for item in items:
                item = json.loads(json.dumps(item))
                item.setdefault("apiVersion", VERSION)
                item.setdefault("kind", "ResourceSlice")
                self._stamp(item)
                self.resource_slices[item["metadata"]["name"]] = item

    def add_claim(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Store a claim as if someone else created it (namespace default unless given)."""
        claim = json.loads(json.dumps(claim))
        claim.setdefault("apiVersion", VERSION)
        claim.setdefault("kind", "ResourceClaim")
        meta = claim.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        with self._lock:
            self._stamp(claim)
            self.resource_claims[(meta["namespace"], meta["name"])] = claim
        return claim

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self.resource_claims.get((namespace, name))
            return json.loads(json.dumps(found)) if found else None

    def allocate_claim(
        self, namespace: str, name: str, devices: Iterable[tuple[str, str]] | None = None
    ) -> list[tuple[str, str]]:
        """Allocate a claim as the scheduler would: each request gets the (pool, device) of
        `devices` in order, or else the published device whose uuid its selector names.
        Returns what was allocated; AssertionError when a request names no published device."""
        with self._lock:
            claim = self.resource_claims[(namespace, name)]
            requests = claim["spec"]["devices"]["requests"]
            chosen = list(devices) if devices is not None else [self._device_for(r) for r in requests]
            results = [
                {"request": r["name"], "driver": self._driver_of(pool, device), "pool": pool, "device": device}
                for r, (pool, device) in zip(requests, chosen, strict=True)
            ]
            claim["status"] = {"allocation": {"devices": {"results": results}}}
            self._stamp(claim)
            return chosen

    # --- routes ---------------------------------------------------------------------------------

    def _dra_route(self, method: str, parts: list[str], query: dict[str, str], body: Any) -> tuple[int, Any]:
        """`parts` start with "apis"."""
        if not self.serve_dra or parts[1:3] != [GROUP, "v1"]:
            return 404, api_status(404, "NotFound", "the server could not find the requested resource")
        rest = parts[3:]
        if rest == [] and method == "GET":
            return 200, _resource_list()
        if rest == ["resourceslices"] and method == "GET":
            return 200, self._list("ResourceSliceList", list(self.resource_slices.values()), query, VERSION)
        if len(rest) == 2 and rest[0] == "resourceslices" and method == "GET":
            found = self.resource_slices.get(rest[1])
            return (200, found) if found else not_found("resourceslices", rest[1])
        if rest == ["resourceclaims"] and method == "GET":
            return 200, self._list("ResourceClaimList", list(self.resource_claims.values()), query, VERSION)
        if len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] == "resourceclaims":
            if self.namespaces is not None and rest[1] not in self.namespaces:
                return not_found("namespaces", rest[1])
            return self._claims(method, rest[1], rest[3] if len(rest) == 4 else None, query, body)
        return 405, api_status(405, "MethodNotAllowed", f"{method} /{'/'.join(parts)} not served")

    def _claims(
        self, method: str, namespace: str, name: str | None, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        if name is None and method == "GET":
            items = [c for (ns, _), c in self.resource_claims.items() if ns == namespace]
            return 200, self._list("ResourceClaimList", items, query, VERSION)
        if name is None and method == "POST":
            meta = (body or {}).get("metadata") or {}
            if not meta.get("name"):
                return 400, api_status(400, "BadRequest", "name or generateName is required")
            if meta.setdefault("namespace", namespace) != namespace:
                return 400, api_status(400, "BadRequest", "the namespace of the provided object does not "
                                    "match the namespace sent on the request")  # fmt: skip
            if (namespace, meta["name"]) in self.resource_claims:
                return 409, api_status(
                    409, "AlreadyExists", f'resourceclaims.resource.k8s.io "{meta["name"]}" already exists',
                    details={"name": meta["name"], "kind": "resourceclaims"},
                )  # fmt: skip
            self._stamp(body)
            self.resource_claims[(namespace, meta["name"])] = body
            return 201, body
        claim = self.resource_claims.get((namespace, name or ""))
        if claim is None:
            return not_found("resourceclaims.resource.k8s.io", name or "")
        if method == "GET":
            return 200, claim
        if method == "DELETE":
            del self.resource_claims[(namespace, name or "")]
            return 200, claim
        return 405, api_status(405, "MethodNotAllowed", f"{method} not served for resourceclaims")

    # --- helpers --------------------------------------------------------------------------------

    def _published(self) -> Iterable[tuple[str, str, dict[str, Any]]]:
        """(driver, pool, device) of every published device."""
        for item in self.resource_slices.values():
            spec = item["spec"]
            for device in spec.get("devices") or []:
                yield spec["driver"], spec["pool"]["name"], device

    def _device_for(self, request: dict[str, Any]) -> tuple[str, str]:
        for selector in request.get("exactly", {}).get("selectors") or []:
            match = _UUID_SELECTOR_RE.match(selector.get("cel", {}).get("expression", ""))
            if not match:
                continue
            domain, uuid = match[1], match[2]
            for driver, pool, device in self._published():
                attribute = (device.get("attributes") or {}).get("uuid") or {}
                if driver == domain and attribute.get("string") == uuid:
                    return pool, device["name"]
        raise AssertionError(f"request {request.get('name')} names no published device: {request}")

    def _driver_of(self, pool: str, device: str) -> str:
        for driver, pool_name, published in self._published():
            if pool_name == pool and published["name"] == device:
                return str(driver)
        return "gpu.nvidia.com"


def _resource_list() -> dict[str, Any]:
    resources = [
        ("deviceclasses", "DeviceClass", False), ("resourceclaims", "ResourceClaim", True),
        ("resourceclaimtemplates", "ResourceClaimTemplate", True), ("resourceslices", "ResourceSlice", False),
    ]  # fmt: skip
    return {
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": VERSION,
        "resources": [{"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
                       "verbs": ["create", "delete", "get", "list", "watch"]}
                      for name, kind, namespaced in resources],
    }  # fmt: skip


def api_status(code: int, reason: str, message: str, details: dict | None = None) -> dict[str, Any]:
    """A `kind: Status` error body with the API server's wording."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip
    if details:
        body["details"] = details
    return body


def not_found(kind: str, name: str) -> tuple[int, dict[str, Any]]:
    return 404, api_status(404, "NotFound", f'{kind} "{name}" not found', details={"name": name, "kind": kind})
