"""A small stateful Kubernetes API server for tests: real HTTP on 127.0.0.1, JSON, core/v1 only.

Why our own and not kmock: the tests need things kmock 0.8 does not give (creationTimestamp,
uid, fault injection of N consecutive 5xx or slow answers, honouring or ignoring field
selectors on demand, chunked lists with `continue`), and a plain threaded `http.server`
needs no asyncio loop in a background thread. The official `kubernetes` client talks to it
unchanged; only `Configuration.host` points here.

Served (the subset gpupool uses):
    GET  /api/v1/nodes[/{name}]                     (fieldSelector, labelSelector, limit/continue)
    GET  /api/v1/pods                               (all namespaces; same query options)
    GET  POST   /api/v1/namespaces/{ns}/pods
    GET  DELETE /api/v1/namespaces/{ns}/pods/{name}
    GET  /api/v1/namespaces/{ns}/pods/{name}/log      (streamed: `tests.support.kube_logs`)
    GET  /api/v1/namespaces/{ns}/pods/{name}/exec     (a websocket: `tests.support.kube_exec`)
    GET  /api/v1/namespaces/{ns}/events
and Dynamic Resource Allocation's ResourceSlices and ResourceClaims (`tests.support.kube_dra`); field
and label selectors are matched as the API server does (`tests.support.kube_selectors`).
Errors come back as `kind: Status` bodies with the API server's wording (404 NotFound, 409
AlreadyExists, 400 BadRequest). Deletion is immediate; the grace period asked for is recorded, and
a `preconditions.uid` in the delete's body is honoured (409 Conflict when the pod's uid differs).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.kube_dra import DraRoutes
from tests.support.kube_dra import api_status as _status
from tests.support.kube_dra import not_found as _not_found
from tests.support.kube_exec import PodExecRoutes
from tests.support.kube_logs import PodLogRoutes
from tests.support.kube_selectors import field_value, label_value, selected
from tests.support.loopback import LoopbackServer


@dataclass
class Fault:
    """Answer the next `count` matching requests with `status` (0: answer normally) after
    sleeping `delay_s`."""

    count: int
    status: int = 500
    delay_s: float = 0.0
    method: str | None = None
    path_prefix: str | None = None
    message: str = "injected failure"
    #: Seconds sent in a `Retry-After` header with the failure (as an API server's 429 or
    #: priority-and-fairness rejection does); None: no header.
    retry_after: float | None = None

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_prefix is None or path.startswith(self.path_prefix)
        )


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)  # when it arrived (retry pacing tests)


@dataclass
class KubeApiServer(DraRoutes, PodLogRoutes, PodExecRoutes, LoopbackServer):
    """The server's state and the hooks tests use. Thread-safe; start() before use."""

    honour_field_selectors: bool = True
    namespaces: set[str] | None = None  # None: every namespace exists
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _httpd: ThreadingHTTPServer | None = field(default=None, repr=False)
    _version: int = 1

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> KubeApiServer:
        server = self

        class Handler(_Handler):
            api = server

        self._listen(Handler)
        return self


    # --- hooks for tests ------------------------------------------------------------------------

    def load_nodes(self, source: str | Path | dict[str, Any] | list[dict[str, Any]]) -> None:
        """Add nodes from a `kind: List`/`NodeList` JSON file or object, or a list of Nodes."""
        data = json.loads(Path(source).read_text()) if isinstance(source, str | Path) else source
        items = data.get("items", [data]) if isinstance(data, dict) else data
        with self._lock:
            for node in items:
                node = json.loads(json.dumps(node))
                node.setdefault("apiVersion", "v1")
                node.setdefault("kind", "Node")
                self.nodes[node["metadata"]["name"]] = node

    def add_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Store a pod as if someone else created it (defaults: namespace default, Running)."""
        pod = json.loads(json.dumps(pod))
        meta = pod.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        pod.setdefault("status", {}).setdefault("phase", "Running")
        with self._lock:
            self._stamp(pod)
            self.pods[(meta["namespace"], meta["name"])] = pod
        return pod

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self.pods.get((namespace, name))
            return json.loads(json.dumps(found)) if found else None

    def set_pod_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        exit_code: int | None = None,
        reason: str = "",
        message: str = "",
    ) -> None:
        """Move a pod to `phase`; with `exit_code`, its first container ends with that code."""
        with self._lock:
            pod = self.pods[(namespace, name)]
            status = pod.setdefault("status", {})
            status["phase"] = phase
            if reason:
                status["reason"] = reason
            if message:
                status["message"] = message
            if exit_code is not None:
                container = pod["spec"]["containers"][0]["name"]
                terminated = {
                    "exitCode": exit_code,
                    "reason": "Error" if exit_code else "Completed",
                }
                status["containerStatuses"] = [
                    {"name": container, "ready": False, "restartCount": 0,
                     "image": pod["spec"]["containers"][0].get("image", ""), "imageID": "",
                     "state": {"terminated": terminated}},
                ]  # fmt: skip

    def set_pod_created(self, namespace: str, name: str, when: datetime) -> None:
        with self._lock:
            self.pods[(namespace, name)]["metadata"]["creationTimestamp"] = _rfc3339(when)

    def remove_pod(self, namespace: str, name: str) -> None:
        """Delete a pod behind gpupool's back (as `kubectl delete` by someone else would)."""
        with self._lock:
            del self.pods[(namespace, name)]

    def add_event(
        self, namespace: str, pod_name: str, reason: str, message: str, type_: str = "Warning"
    ) -> None:
        with self._lock:
            self._version += 1
            self.events.append(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{pod_name}.{self._version}", "namespace": namespace},
                    "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": namespace},
                    "reason": reason,
                    "message": message,
                    "type": type_,
                    "count": 1,
                    "lastTimestamp": _rfc3339(datetime.now(UTC)),
                }
            )

    def fail_next(self, count: int, *, status: int = 500, **match: Any) -> None:
        """The next `count` requests (matching `method=`/`path_prefix=`) get `status`."""
        with self._lock:
            self.faults.append(Fault(count=count, status=status, **match))

    def delay_next(self, count: int, seconds: float, **match: Any) -> None:
        """The next `count` matching requests are answered normally, after `seconds`."""
        with self._lock:
            self.faults.append(Fault(count=count, status=0, delay_s=seconds, **match))

    def requests_to(self, method: str, path_prefix: str = "/") -> list[Request]:
        with self._lock:
            return [
                r for r in self.requests if r.method == method and r.path.startswith(path_prefix)
            ]

    # --- request handling -----------------------------------------------------------------------

    def _stamp(self, obj: dict[str, Any]) -> None:
        self._version += 1
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _rfc3339(datetime.now(UTC)))
        meta["resourceVersion"] = str(self._version)

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.count > 0 and fault.matches(method, path):
                    fault.count -= 1
                    return fault
        return None

    def handle(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, JSON body, response headers to send besides Content-Type)."""
        with self._lock:
            recorded = Request(method, path, query, json.loads(json.dumps(body)), headers or {})
            self.requests.append(recorded)
        fault = self._take_fault(method, path)
        if fault is not None:
            time.sleep(fault.delay_s)
            if fault.status:
                extra = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
                reason = "TooManyRequests" if fault.status == 429 else "InternalError"
                return fault.status, _status(fault.status, reason, fault.message), extra
        parts = [p for p in path.split("/") if p]
        with self._lock:
            return (*self._route(method, parts, query, body), {})

    def _route(
        self, method: str, parts: list[str], query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        if parts[:1] == ["apis"]:
            return self._dra_route(method, parts, query, body)
        if parts[:2] != ["api", "v1"]:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        rest = parts[2:]
        if rest == ["nodes"] and method == "GET":
            return 200, self._list("NodeList", list(self.nodes.values()), query)
        if len(rest) == 2 and rest[0] == "nodes" and method == "GET":
            node = self.nodes.get(rest[1])
            return (200, node) if node else _not_found("nodes", rest[1])
        if rest == ["pods"] and method == "GET":
            return 200, self._list("PodList", list(self.pods.values()), query)
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, collection, name = rest[1], rest[2], (rest[3] if len(rest) > 3 else None)
            if self.namespaces is not None and namespace not in self.namespaces:
                return _not_found("namespaces", namespace)
            if collection == "events" and name is None and method == "GET":
                items = [e for e in self.events if e["metadata"]["namespace"] == namespace]
                return 200, self._list("EventList", items, query)
            if collection == "pods":
                return self._pods(method, namespace, name, query, body)
        return 405, _status(405, "MethodNotAllowed", f"{method} /{'/'.join(parts)} not served")

    def _pods(
        self, method: str, namespace: str, name: str | None, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        if name is None and method == "GET":
            items = [p for (ns, _), p in self.pods.items() if ns == namespace]
            return 200, self._list("PodList", items, query)
        if name is None and method == "POST":
            if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
                return 400, _status(400, "BadRequest", "name or generateName is required")
            meta = body["metadata"]
            if meta.setdefault("namespace", namespace) != namespace:
                return 400, _status(
                    400, "BadRequest", "the namespace of the provided object does not match "
                    "the namespace sent on the request",
                )  # fmt: skip
            if (namespace, meta["name"]) in self.pods:
                return 409, _status(
                    409, "AlreadyExists", f'pods "{meta["name"]}" already exists',
                    details={"name": meta["name"], "kind": "pods"},
                )  # fmt: skip
            body.setdefault("status", {})["phase"] = "Pending"
            self._stamp(body)
            self.pods[(namespace, meta["name"])] = body
            return 201, body
        pod = self.pods.get((namespace, name or ""))
        if pod is None:
            return _not_found("pods", name or "")
        if method == "GET":
            return 200, pod
        if method == "DELETE":
            wanted = ((body or {}).get("preconditions") or {}).get("uid") if isinstance(body, dict) else None
            if wanted and wanted != pod["metadata"].get("uid"):
                return 409, _status(
                    409, "Conflict", f"Precondition failed: UID in precondition: {wanted}, "
                    f"UID in object meta: {pod['metadata'].get('uid')}",
                )  # fmt: skip
            del self.pods[(namespace, name or "")]
            return 200, pod
        return 405, _status(405, "MethodNotAllowed", f"{method} not served for pods")

    def _list(
        self, kind: str, items: list[dict[str, Any]], query: dict[str, str], api_version: str = "v1"
    ) -> dict[str, Any]:
        if self.honour_field_selectors and query.get("fieldSelector"):
            items = [i for i in items if selected(i, query["fieldSelector"], field_value)]
        if query.get("labelSelector"):
            items = [i for i in items if selected(i, query["labelSelector"], label_value)]
        items = sorted(
            items, key=lambda i: (i["metadata"].get("namespace", ""), i["metadata"]["name"])
        )
        meta: dict[str, Any] = {"resourceVersion": str(self._version)}
        limit = int(query.get("limit") or 0)
        if limit:
            start = int(query.get("continue") or 0)
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
            items = items[start : start + limit]
        return {"apiVersion": api_version, "kind": kind, "metadata": meta, "items": items}


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiServer
    protocol_version = "HTTP/1.1"  # keep-alive, as urllib3's pool expects

    def _serve(self) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        if (pod := self.api.log_path(self.command, split.path)) is not None:
            self.api.requests.append(Request(self.command, split.path, query))
            self.api.serve_log(self, *pod, query)
            return
        if (pod := self.api.exec_path(self.command, split.path)) is not None:
            self.api.requests.append(Request(self.command, split.path, query))
            self.api.serve_exec(self, *pod)
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        extra: dict[str, str] = {}
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            status, payload = 400, _status(400, "BadRequest", "request body is not JSON")
        else:
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload, extra = self.api.handle(self.command, split.path, query, body, headers)
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (a timeout test); nothing to answer

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean; `KubeApiServer.requests` records every call


# --- helpers --------------------------------------------------------------------------------------


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
