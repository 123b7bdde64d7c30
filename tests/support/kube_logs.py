"""The pod `log` subresource of the Kubernetes test server, and pods that really run.

Mixed into `KubeApiServer`. Served, as the API server (through the kubelet) does:
    GET /api/v1/namespaces/{ns}/pods/{name}/log   (container, follow, tailLines)
text/plain, chunked. A Pending pod's log is a 400 ("waiting to start"), an unknown container a
400, a missing pod a 404. With `follow=true` the answer stays open: what is appended to the log is
sent as it comes, and the answer ends once the pod has terminated (Succeeded or Failed) or is
deleted, after the last bytes, as the kubelet ends a follow when the container exits.

`run_pod` runs a pod's first container command (its `command` + `args`) as a local process, as a
node would: Running while it runs, its stdout and stderr its log, then Succeeded or Failed with
its exit code. No image is pulled: the command must exist here (`sh -c '...'`).
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from tests.support.kube_dra import api_status

ENDED = ("Succeeded", "Failed")
LOOK_S = 0.02  # how often a follow looks for new bytes and the pod's end


@dataclass
class PodLogRoutes:
    pod_logs: dict[tuple[str, str], bytearray] = field(default_factory=dict)
    _log_changed: threading.Condition = field(default_factory=threading.Condition, repr=False)

    if TYPE_CHECKING:  # provided by KubeApiServer
        def pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...
        def set_pod_phase(self, namespace: str, name: str, phase: str, *, exit_code: int | None = None,
                          reason: str = "", message: str = "") -> None: ...  # fmt: skip

    # --- hooks for tests ------------------------------------------------------------------------

    def append_pod_log(self, namespace: str, name: str, data: str | bytes) -> None:
        with self._log_changed:
            self.pod_logs.setdefault((namespace, name), bytearray()).extend(
                data.encode() if isinstance(data, str) else data)
            self._log_changed.notify_all()

    def run_pod(self, namespace: str, name: str) -> threading.Thread:
        """Run the pod's first container command here (see the module's docstring); returns the
        thread that waits for it and records its end."""
        pod = self.pod(namespace, name)
        assert pod is not None, f"no pod {namespace}/{name}"
        container = pod["spec"]["containers"][0]
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.set_pod_phase(namespace, name, "Running")

        def pump() -> None:
            assert process.stdout is not None
            while data := os.read(process.stdout.fileno(), 65536):  # as soon as some bytes are there
                self.append_pod_log(namespace, name, data)
            code = process.wait()
            if self.pod(namespace, name) is not None:
                self.set_pod_phase(namespace, name, "Failed" if code else "Succeeded", exit_code=code)
            with self._log_changed:
                self._log_changed.notify_all()

        thread = threading.Thread(target=pump, name=f"pod-{name}", daemon=True)
        thread.start()
        return thread

    # --- serving --------------------------------------------------------------------------------

    @staticmethod
    def log_path(method: str, path: str) -> tuple[str, str] | None:
        """(namespace, pod) when this is a pod log request."""
        parts = [p for p in path.split("/") if p]
        if method == "GET" and len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] \
                and parts[4] == "pods" and parts[6] == "log":
            return parts[3], parts[5]
        return None

    def serve_log(self, handler: BaseHTTPRequestHandler, namespace: str, name: str, query: dict[str, str]) -> None:
        status, problem = self._log_problem(namespace, name, query.get("container", ""))
        if problem is not None:
            _send_json(handler, status, problem)
            return
        with self._log_changed:
            data = bytes(self.pod_logs.get((namespace, name), b""))
        sent = len(data)
        if query.get("tailLines"):
            data = _last_lines(data, int(query["tailLines"]))
        follow = query.get("follow") in ("true", "1")
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            _chunk(handler, data)
            while follow:
                with self._log_changed:
                    self._log_changed.wait(LOOK_S)
                    log = bytes(self.pod_logs.get((namespace, name), b""))
                pod = self.pod(namespace, name)
                over = pod is None or (pod.get("status") or {}).get("phase") in ENDED
                _chunk(handler, log[sent:])
                sent = len(log)
                if over:
                    break
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the client went away mid-follow

    def _log_problem(self, namespace: str, name: str, container: str) -> tuple[int, Any]:
        pod = self.pod(namespace, name)
        if pod is None:
            return 404, api_status(404, "NotFound", f'pods "{name}" not found', details={"name": name, "kind": "pods"})
        names = [c.get("name") for c in pod["spec"].get("containers", [])]
        if container and container not in names:
            return 400, api_status(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if not container and len(names) > 1:
            return 400, api_status(400, "BadRequest", f"a container name must be specified for pod {name}, "
                                                      f"choose one of: {names}")
        if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            return 400, api_status(400, "BadRequest", f'container "{container or names[0]}" in pod "{name}" is '
                                                      "waiting to start: ContainerCreating")
        return 200, None


def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    if data:
        handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        handler.wfile.flush()


def _send_json(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    import json

    payload = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


def _last_lines(data: bytes, count: int) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-count:]) if count > 0 else b""
