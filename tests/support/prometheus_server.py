"""A Prometheus-compatible HTTP API for tests, serving NVIDIA DCGM exporter series.

Real HTTP on 127.0.0.1 (threaded `http.server`), answering `GET|POST /api/v1/query?query=EXPR`
the way Prometheus does: `{"status": "success", "data": {"resultType": "vector", "result":
[{"metric": {...}, "value": [t, "42"]}]}}`, values as strings (`"NaN"`, `"+Inf"` included), and
`{"status": "error", "errorType": ..., "error": ...}` bodies on failure. EXPR is a metric name
with optional label matchers (`=`, `!=`, `=~`, `!~`): what gpupool sends; anything else is a 400
`bad_data` as Prometheus gives for a query it cannot parse.

Series have the shape the DCGM exporter gives them once kube-prometheus-stack has scraped it
through a ServiceMonitor (the exporter's template and the GPU operator's defaults): exporter labels
`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, MIG
`GPU_I_PROFILE`/`GPU_I_ID`; target labels `instance`, `job`, `namespace`, `pod`, `container`,
`service`, `endpoint` (the exporter's own pod); so the pod the exporter maps a GPU to comes as
`exported_namespace`/`exported_pod`/`exported_container`. `DcgmGpu` builds them.

Hooks: bearer or basic auth required (`token`, `basic`), faults (`fail_next`: N answers of a
status, optionally slow or not JSON), and every request recorded (`requests`).
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from agents import dcgm
from tests.support.loopback import LoopbackServer


@dataclass
class Fault:
    """Answer the next `count` queries with `status` (0: answer normally) after `delay_s`; `body`
    replaces the answer (e.g. an HTML error page)."""

    count: int
    status: int = 500
    delay_s: float = 0.0
    body: str | None = None
    retry_after: float | None = None


@dataclass
class Request:
    path: str
    query: str
    headers: dict[str, str]


@dataclass
class DcgmGpu:
    """One GPU (or, with `instance` set, one MIG GPU instance) as the exporter reports it.
    A metric whose value is None is not exported (the exporter skips blank fields)."""

    node: str
    gpu: int
    uuid: str
    model: str = "NVIDIA A100-SXM4-80GB"
    util: float | str | None = 0.0
    fb_used: float | None = 0.0
    fb_free: float | None = 81_000.0
    temp: float | None = 35.0
    power: float | None = 60.0
    xid: float | None = 0.0
    ecc_dbe: float | None = None  # off in the exporter's default counters
    row_remap_failure: float | None = 0.0
    gr_engine_active: float | None = None  # DCP counter set only
    instance: int | None = None
    profile: str = ""
    pod: tuple[str, str] | None = None  # (namespace, name) the exporter maps the GPU to
    node_label: str = "Hostname"  # or a scrape config's "node"
    driver: str = "550.90.07"

    def labels(self) -> dict[str, str]:
        labels = {"gpu": str(self.gpu), "UUID": self.uuid, "pci_bus_id": f"00000000:{0x18 + 0x10 * self.gpu:02X}:00.0",
                  "device": f"nvidia{self.gpu}", "modelName": self.model, self.node_label: self.node,
                  "DCGM_FI_DRIVER_VERSION": self.driver, "instance": "10.42.0.17:9400",
                  "job": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
                  "pod": f"nvidia-dcgm-exporter-{self.node[-5:]}",
                  "container": "nvidia-dcgm-exporter", "service": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics"}
        if self.instance is not None:
            labels |= {"GPU_I_PROFILE": self.profile, "GPU_I_ID": str(self.instance)}
        if self.pod is not None:
            labels |= {"exported_namespace": self.pod[0], "exported_pod": self.pod[1], "exported_container": "main"}
        return labels

    def series(self) -> Iterator[tuple[str, dict[str, str], float | str]]:
        values = {dcgm.UTIL: self.util, dcgm.FB_USED: self.fb_used, dcgm.FB_FREE: self.fb_free,
                  dcgm.TEMP: self.temp, dcgm.POWER: self.power, dcgm.XID: self.xid, dcgm.ECC_DBE: self.ecc_dbe,
                  dcgm.ROW_REMAP_FAILURE: self.row_remap_failure, dcgm.GR_ENGINE_ACTIVE: self.gr_engine_active}
        for metric, value in values.items():
            if value is not None:
                yield metric, {"__name__": metric, **self.labels()}, value


_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
_EXPR = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(.*)\})?\s*$")


@dataclass
class PrometheusServer(LoopbackServer):
    """State and hooks; thread-safe; start() before use."""

    token: str = ""
    basic: tuple[str, str] | None = None
    series: list[tuple[str, dict[str, str], float | str]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _httpd: ThreadingHTTPServer | None = field(default=None, repr=False)

    def start(self) -> PrometheusServer:
        server = self

        class Handler(_Handler):
            prometheus = server

        self._listen(Handler)
        return self


    # --- hooks ------------------------------------------------------------------------------------

    def set_gpus(self, *gpus: DcgmGpu) -> None:
        """Replace every series with those of `gpus`."""
        with self._lock:
            self.series = [s for gpu in gpus for s in gpu.series()]

    def add_series(self, metric: str, labels: dict[str, str], value: float | str) -> None:
        with self._lock:
            self.series.append((metric, {"__name__": metric, **labels}, value))

    def fail_next(self, count: int, *, status: int = 500, delay_s: float = 0.0, body: str | None = None,
                  retry_after: float | None = None) -> None:
        with self._lock:
            self.faults.append(Fault(count, status, delay_s, body, retry_after))

    def queries(self) -> list[str]:
        with self._lock:
            return [r.query for r in self.requests]

    # --- serving ----------------------------------------------------------------------------------

    def handle(self, path: str, query: str, headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
        """(status, body, extra headers) for one request."""
        with self._lock:
            self.requests.append(Request(path, query, headers))
            fault = next((f for f in self.faults if f.count > 0), None)
            if fault is not None:
                fault.count -= 1
        if fault is not None and fault.delay_s:
            time.sleep(fault.delay_s)
        if not self._authorized(headers.get("authorization", "")):
            return 401, "Unauthorized\n", {"WWW-Authenticate": 'Bearer realm="prometheus"'}
        if fault is not None and fault.status:
            extra = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
            body = fault.body if fault.body is not None else _error("internal", "injected failure")
            return fault.status, body, extra
        if fault is not None and fault.body is not None:
            return 200, fault.body, {}
        if path != "/api/v1/query":
            return 404, "404 page not found\n", {}
        return self._query(query)

    def _authorized(self, header: str) -> bool:
        if self.token:
            return header == f"Bearer {self.token}"
        if self.basic:
            expected = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
            return header == f"Basic {expected}"
        return True

    def _query(self, expr: str) -> tuple[int, str, dict[str, str]]:
        match = _EXPR.match(expr)
        matchers = _matchers(match[2] or "") if match else None
        if match is None or matchers is None:
            return 400, _error("bad_data", f'invalid parameter "query": 1:1: parse error: {expr!r}'), {}
        now = round(time.time(), 3)
        with self._lock:
            result = [{"metric": labels, "value": [now, _text(value)]} for metric, labels, value in self.series
                      if metric == match[1] and all(_holds(labels.get(k, ""), op, v) for k, op, v in matchers)]
        return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}), {}


class _Handler(BaseHTTPRequestHandler):
    prometheus: PrometheusServer
    protocol_version = "HTTP/1.1"
    # Headers and body leave in one send (flushed after the handler): written apart, Nagle and
    # delayed ACKs hold each keep-alive answer ~40 ms.
    wbufsize = 1 << 16

    def _serve(self) -> None:
        split = urlsplit(self.path)
        params = parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        if length:  # Prometheus takes the query as a form body too
            params |= parse_qs(self.rfile.read(length).decode())
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, body, extra = self.prometheus.handle(split.path, (params.get("query") or [""])[-1], headers)
        data = body.encode()
        try:
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json" if body.startswith("{") else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    do_GET = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _error(kind: str, message: str) -> str:
    return json.dumps({"status": "error", "errorType": kind, "error": message})


def _text(value: float | str) -> str:
    """A sample value as Prometheus writes it."""
    if isinstance(value, str):
        return value
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _matchers(text: str) -> list[tuple[str, str, str]] | None:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        found = _MATCHER.match(text, pos)
        if found is None:
            return None
        out.append((found[1], found[2], found[3].encode().decode("unicode_escape")))
        pos = found.end()
    return out


def _holds(value: str, op: str, wanted: str) -> bool:
    if op == "=":
        return value == wanted
    if op == "!=":
        return value != wanted
    full = re.fullmatch(wanted, value) is not None
    return full if op == "=~" else not full
