"""Telemetry of a Kubernetes source: NVIDIA DCGM exporter metrics, read from Prometheus.

Config (`sources[].telemetry` of a kubernetes source)::

    telemetry:
      prometheus_url: https://prometheus.monitoring:9090   # the Prometheus HTTP API (or Thanos, Mimir)
      token: ...                  # bearer token; or username + password (basic auth). Secrets:
      username: ... / password:   #   stored encrypted, never exported
      ca_file: /etc/ssl/prom.pem  # a CA bundle for https (default: the system's)
      selector: 'cluster="kB"'    # label matchers added to every query (one Prometheus, many clusters)
      timeout: 10                 # seconds one query may take
      ignore_xids: [94]           # XIDs that leave a GPU healthy, beside the application ones

One instant query per metric (`GET /api/v1/query?query=DCGM_FI_DEV_GPU_UTIL{selector}`) for the
whole cluster, filtered client-side by node: the cost does not grow with the nodes. Each query is
bounded by `timeout` and the whole read by the connector's retry budget; answers worth another
try (5xx, 429) are retried by the connector's `retrying`, the rest (refused, timed out, 401,
not Prometheus) end the read at once. A read that fails is never a discovery failure: the hosts
come back with their telemetry None and `Discovery.telemetry_error` says why.

`agents.dcgm` parses the series and pairs them with the GPUs.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from agents.base import AgentError, Discovery, HostFact, RetryableError
from agents.dcgm import APPLICATION_XIDS, METRICS, apply_reading, match_node, node_readings, resolve_nodes
from agents.k8s_api import retry_after_s
from agents.k8s_pod_manifest import GPUS_ANNOTATION
from agents.k8s_resources import LEASE_LABEL, is_active_pod

T = TypeVar("T")

TELEMETRY_KEYS = frozenset({"prometheus_url", "token", "username", "password", "ca_file", "selector", "timeout",
                            "ignore_xids"})
#: Secret config keys, as paths into the source's config (`inventory.secrets` stores them apart).
SECRET_FIELDS = ("telemetry.token", "telemetry.password")
DEFAULT_TIMEOUT_S = 10.0

_LABEL_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR_RE = re.compile(rf"^{_LABEL_MATCHER}(,{_LABEL_MATCHER})*,?\s*$")


class Retrying(Protocol):
    """`Connector.retrying`."""

    def __call__(self, what: str, attempt: Callable[[float], T], *, timeout: float | None = None) -> T: ...


# --- configuration --------------------------------------------------------------------------------


def validate_telemetry(value: Any) -> list[str]:
    """Human error messages for a `telemetry:` entry (empty when fine)."""
    if not isinstance(value, Mapping):
        return ["'telemetry' must be a mapping like {prometheus_url: https://prometheus:9090}"]
    errors = []
    unknown = sorted(set(value) - TELEMETRY_KEYS)
    if unknown:
        errors.append(f"'telemetry' has unknown key(s) {', '.join(map(repr, unknown))}; "
                      f"allowed: {', '.join(sorted(TELEMETRY_KEYS))}")
    url = value.get("prometheus_url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        errors.append(f"'telemetry.prometheus_url' must be an http(s) URL, got {url!r}")
    errors.extend(_credential_errors(value))
    selector = value.get("selector")
    if isinstance(selector, str) and selector and not _SELECTOR_RE.match(selector):
        errors.append(f"'telemetry.selector' must be PromQL label matchers like 'cluster=\"kB\"', got {selector!r}")
    timeout = value.get("timeout", 1)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        errors.append(f"'telemetry.timeout' must be a positive number of seconds, got {timeout!r}")
    xids = value.get("ignore_xids", [])
    if not isinstance(xids, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in xids):
        errors.append(f"'telemetry.ignore_xids' must be a list of XID numbers, got {xids!r}")
    return errors


def _credential_errors(value: Mapping[str, Any]) -> list[str]:
    errors = [f"'telemetry.{key}' must be a non-empty string"
              for key in ("token", "username", "password", "ca_file", "selector")
              if key in value and (not isinstance(value[key], str) or not value[key])]
    if value.get("token") and (value.get("username") or value.get("password")):
        errors.append("'telemetry' takes a token or a username and password, not both")
    if bool(value.get("username")) != bool(value.get("password")):
        errors.append("'telemetry.username' and 'telemetry.password' go together")
    return errors


@dataclass(frozen=True)
class TelemetryConfig:
    url: str
    token: str = ""
    username: str = ""
    password: str = ""
    ca_file: str = ""
    selector: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    ignore_xids: frozenset[int] = APPLICATION_XIDS

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TelemetryConfig | None:
        """The source's `telemetry` entry (secrets already merged in), or None without one.
        Values are trusted: `validate_telemetry` checked them when the config was applied."""
        entry = config.get("telemetry")
        if not isinstance(entry, Mapping) or not entry.get("prometheus_url"):
            return None
        timeout = entry.get("timeout")
        return cls(
            url=str(entry["prometheus_url"]).rstrip("/"), token=str(entry.get("token") or ""),
            username=str(entry.get("username") or ""), password=str(entry.get("password") or ""),
            ca_file=str(entry.get("ca_file") or ""), selector=str(entry.get("selector") or "").strip(),
            timeout_s=float(timeout) if isinstance(timeout, int | float) and timeout > 0 else DEFAULT_TIMEOUT_S,
            ignore_xids=APPLICATION_XIDS | frozenset(int(x) for x in entry.get("ignore_xids") or ()))


# --- reading --------------------------------------------------------------------------------------


class PrometheusReader:
    """Instant queries against one Prometheus HTTP API, bounded and retried by `retrying`."""

    def __init__(self, config: TelemetryConfig, retrying: Retrying, *, budget_s: Callable[[], float]) -> None:
        self.config = config
        self.retrying = retrying
        # A callable: the connector's budget as it is at read time (tests shrink it after building).
        self.budget_s = budget_s

    def read(self) -> dict[str, list[dict[str, Any]]]:
        """Metric name → its instant-vector samples, for every DCGM metric we use. Raises
        AgentError (words naming the metric and the URL) on the first query that fails."""
        import requests

        budget = self.budget_s()
        deadline = time.monotonic() + budget
        answers: dict[str, list[dict[str, Any]]] = {}
        with requests.Session() as session:
            for metric in METRICS:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AgentError(f"cannot read telemetry from {self.config.url}: the queries took longer "
                                     f"than {budget:g} s", permanent=False)
                what = f"cannot read {metric} from Prometheus ({self.config.url})"
                answers[metric] = self.retrying(what, partial(self._query, session, metric, what),
                                                timeout=min(self.config.timeout_s, left))
        return answers

    def _query(self, session: Any, metric: str, what: str, timeout: float) -> list[dict[str, Any]]:
        import requests

        config = self.config
        expr = f"{metric}{{{config.selector}}}" if config.selector else metric
        headers = {"Accept": "application/json"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        auth = (config.username, config.password) if config.username else None
        try:
            response = session.get(f"{config.url}/api/v1/query", params={"query": expr}, headers=headers,
                                   auth=auth, timeout=timeout, verify=config.ca_file or True,
                                   allow_redirects=False)
        except requests.Timeout:
            raise AgentError(f"{what}: no answer within {timeout:.1f} s", permanent=False) from None
        except requests.ConnectionError as exc:
            raise AgentError(f"{what}: {_connection_problem(exc)}", permanent=False) from None
        except requests.RequestException as exc:
            raise AgentError(f"{what}: {exc}", permanent=True) from None
        return _vector(response, what)


def _vector(response: Any, what: str) -> list[dict[str, Any]]:
    """The `result` of an instant-vector answer; RetryableError for what may pass (5xx, 429)."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    message = body.get("error") if isinstance(body, dict) else None
    if status in (401, 403):
        raise AgentError(f"{what}: not allowed (HTTP {status}): check the telemetry token or username and "
                         "password", permanent=True)
    if status == 429 or status >= 500:
        raise RetryableError(f"Prometheus answered HTTP {status}" + (f": {message}" if message else ""),
                             retry_after=retry_after_s(response.headers))
    if status != 200 or not isinstance(body, dict):
        detail = f": {message}" if message else " (is prometheus_url the Prometheus server?)"
        raise AgentError(f"{what}: HTTP {status}{detail}", permanent=True)
    data = body.get("data")
    if body.get("status") != "success" or not isinstance(data, dict):
        raise AgentError(f"{what}: Prometheus answered {body.get('status')!r}: {message or 'no data'}",
                         permanent=True)
    result = data.get("result")
    if data.get("resultType") != "vector" or not isinstance(result, list):
        raise AgentError(f"{what}: expected an instant vector, got {data.get('resultType')!r}", permanent=True)
    return [sample for sample in result if isinstance(sample, dict)]


def _connection_problem(exc: Exception) -> str:
    text = str(exc).lower()
    if "refused" in text:
        return "connection refused (is Prometheus running and prometheus_url right?)"
    if "name or service not known" in text or "nodename nor servname" in text or "name resolution" in text:
        return "the host name of prometheus_url does not resolve"
    if "ssl" in text or "certificate" in text:
        return f"TLS failed: {exc} (telemetry.ca_file names a CA bundle)"
    return f"cannot reach Prometheus: {exc}"


# --- merging into discovery -----------------------------------------------------------------------


def lease_pod_gpus(pods: Sequence[Mapping[str, Any]]) -> dict[str, dict[tuple[str, str], tuple[str, ...]]]:
    """Node name → (namespace, pod) → the GPU uuids its lease holds, for gpupool's active pods
    that carry the `gpupool.io/gpus` annotation (pods bound before it existed do not)."""
    out: dict[str, dict[tuple[str, str], tuple[str, ...]]] = defaultdict(dict)
    for pod in pods:
        metadata = pod.get("metadata") or {}
        uuids = (metadata.get("annotations") or {}).get(GPUS_ANNOTATION)
        node = (pod.get("spec") or {}).get("nodeName")
        if not uuids or not node or LEASE_LABEL not in (metadata.get("labels") or {}) or not is_active_pod(pod):
            continue
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        out[str(node)][key] = tuple(u for u in str(uuids).split(",") if u)
    return dict(out)


def merge_telemetry(hosts: Sequence[HostFact], answers: Mapping[str, Sequence[Mapping[str, Any]]],
                    pods: Sequence[Mapping[str, Any]], *, ignore_xids: frozenset[int] = APPLICATION_XIDS
                    ) -> tuple[HostFact, ...]:
    """`hosts` with each GPU's telemetry (and XID/ECC health) from the DCGM `answers`; a GPU
    without a matching series keeps None. Hosts that failed (`error`) are left alone."""
    import dataclasses

    readings = resolve_nodes(node_readings(answers), (h.name for h in hosts))
    pod_gpus = lease_pod_gpus(pods)
    out = []
    for host in hosts:
        devices = readings.get(host.name)
        if host.error or not devices:
            out.append(host)
            continue
        matches = match_node(host.gpus, devices, pod_gpus.get(host.name, {}))
        gpus = tuple(apply_reading(g, matches.get(g.uuid), ignore_xids=ignore_xids) for g in host.gpus)
        out.append(dataclasses.replace(host, gpus=gpus))
    return tuple(out)


class Telemetry:
    """The hook `KubernetesConnector.discover` calls: read, merge, never raise."""

    def __init__(self, config: TelemetryConfig, retrying: Retrying, *, budget_s: Callable[[], float]) -> None:
        self.config = config
        self.reader = PrometheusReader(config, retrying, budget_s=budget_s)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], retrying: Retrying, *,
                    budget_s: Callable[[], float]) -> Telemetry | None:
        settings = TelemetryConfig.from_config(config)
        return None if settings is None else cls(settings, retrying, budget_s=budget_s)

    def discovery(self, hosts: Sequence[HostFact], pods: Sequence[Mapping[str, Any]]) -> Discovery:
        """The Discovery of `hosts` with telemetry merged in, or as they are with the reason
        telemetry could not be read."""
        try:
            answers = self.reader.read()
            merged = merge_telemetry(hosts, answers, pods, ignore_xids=self.config.ignore_xids)
        except AgentError as exc:
            return Discovery(hosts=tuple(hosts), telemetry_error=exc.message)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # an answer of a shape we did not expect
            return Discovery(hosts=tuple(hosts), telemetry_error=f"cannot read telemetry: {type(exc).__name__}: {exc}")
        return Discovery(hosts=merged, telemetry_ok=True)
