"""The Kubernetes source: GPU nodes of one cluster, and leases bound as pods on them.

Talks to the API server with the official `kubernetes` client (imported inside methods, so
importing this module stays cheap), through one fresh `ApiClient` per connector: no global
client configuration is read or changed, so several clusters can be sources side by side.

Config keys (see CONTRACT.md): `kubeconfig` (path) or `in_cluster: true`, `context`,
`namespace` (where bound pods go, default `gpupool-jobs`), `host` (API URL override, used by
tests), `request_timeout` (s, default 10), `pending_deadline_s` (default 300).

Every call goes through `_call`: a per-request timeout, a few retries with backoff for
transient failures (5xx, 429, timeouts, refused connections) inside a total budget of
`retry_budget_s`, and one AgentError with a sentence in words when it gives up.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from agents.base import (
    BIND_GONE,
    HOST_OFFLINE,
    AgentError,
    BindingStatus,
    BindRequest,
    Connector,
    Discovery,
    HostFact,
    register,
)
from agents.k8s_nodes import LEASE_LABEL, is_active_pod, node_to_host
from agents.k8s_pods import build_pod, events_text, lease_label_value, pod_status, validate_pod

DEFAULT_NAMESPACE = "gpupool-jobs"
DEFAULT_REQUEST_TIMEOUT_S = 10.0
DEFAULT_PENDING_DEADLINE_S = 300
# Pods that still hold resources and sit on a node. Test servers may ignore field selectors,
# so discovery filters the same way client-side.
_ACTIVE_SCHEDULED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
_GONE_REASON = "pod deleted by someone else"


@register("kubernetes")
class KubernetesConnector(Connector):
    """GPU nodes of one Kubernetes cluster; `bind` runs a lease's Pod on the leased node."""

    config_keys = frozenset(
        {
            "kubeconfig",
            "in_cluster",
            "context",
            "namespace",
            "host",
            "request_timeout",
            "pending_deadline_s",
        }
    )
    #: Pauses between attempts of one call; their count bounds the retries.
    retry_delays: ClassVar[tuple[float, ...]] = (0.5, 1.0, 2.0)
    #: Wall-clock ceiling for one call including retries (STYLE: 15 s budget).
    retry_budget_s: ClassVar[float] = 15.0
    #: Chunk size of list calls: big clusters come in pages instead of one huge answer.
    list_page_size: ClassVar[int] = 500

    def __init__(self, name: str, config: Mapping[str, Any]) -> None:
        super().__init__(name, config)
        self.namespace = str(config.get("namespace") or DEFAULT_NAMESPACE)
        self.request_timeout = float(config.get("request_timeout", DEFAULT_REQUEST_TIMEOUT_S))
        self.pending_deadline_s = float(
            config.get("pending_deadline_s", DEFAULT_PENDING_DEADLINE_S)
        )
        self._api_client: Any = None
        self._core_api: Any = None

    # --- configuration ----------------------------------------------------------------------------

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> list[str]:
        errors = []
        in_cluster = config.get("in_cluster", False)
        if not isinstance(in_cluster, bool):
            errors.append("'in_cluster' must be true or false")
        if in_cluster and config.get("kubeconfig"):
            errors.append("give either 'kubeconfig' or 'in_cluster: true', not both")
        if not (in_cluster or config.get("kubeconfig") or config.get("host")):
            errors.append("a kubernetes source needs 'kubeconfig' (a path) or 'in_cluster: true'")
        for key in ("kubeconfig", "context", "host"):
            if key in config and not isinstance(config[key], str):
                errors.append(f"'{key}' must be a string")
        namespace = config.get("namespace", DEFAULT_NAMESPACE)
        if not isinstance(namespace, str) or not _is_dns_label(namespace):
            errors.append(f"'namespace' must be a DNS label (like gpupool-jobs), got {namespace!r}")
        for key in ("request_timeout", "pending_deadline_s"):
            value = config.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                errors.append(f"'{key}' must be a positive number of seconds, got {value!r}")
        return errors

    def _api(self) -> Any:
        """The CoreV1Api of this connector's own ApiClient, built on first use."""
        if self._core_api is not None:
            return self._core_api
        from kubernetes import client
        from kubernetes import config as kube_config

        configuration = client.Configuration()
        try:
            if self.config.get("in_cluster"):
                kube_config.load_incluster_config(client_configuration=configuration)
            elif self.config.get("kubeconfig"):
                kube_config.load_kube_config(
                    config_file=str(self.config["kubeconfig"]),
                    context=self.config.get("context") or None,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except (kube_config.ConfigException, OSError, ValueError) as exc:
            raise AgentError(f"cannot load Kubernetes credentials: {exc}", permanent=True) from exc
        if self.config.get("host"):
            configuration.host = str(self.config["host"]).rstrip("/")
        # Retries belong to `_call` (with backoff and a budget), not to urllib3's silent ones.
        configuration.retries = 0
        self._api_client = client.ApiClient(configuration)
        self._core_api = client.CoreV1Api(self._api_client)
        return self._core_api

    def close(self) -> None:
        """Drop the HTTP connection pool. The connector builds a new one if used again."""
        if self._api_client is not None:
            self._api_client.close()
        self._api_client = self._core_api = None

    # --- the one place that talks to the API server ----------------------------------------------

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call `CoreV1Api.<method>` and return the JSON answer as a dict.

        Transient failures are retried after `retry_delays` while the budget lasts, then raise
        AgentError(permanent=False). Other 4xx raise AgentError(permanent=True) with the API's
        own message. 404 and 409 raise `_Refused`: callers give them a meaning (gone,
        already exists).
        """
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        api = self._api()
        deadline = time.monotonic() + self.retry_budget_s
        attempts = len(self.retry_delays) + 1
        for attempt in range(attempts):
            timeout = min(self.request_timeout, max(deadline - time.monotonic(), 0.1))
            try:
                response = getattr(api, method)(
                    *args, _preload_content=False, _request_timeout=timeout, **kwargs
                )
            except ApiException as exc:
                if exc.status in (404, 409):
                    raise _Refused(exc.status, _status_message(exc)) from None
                problem, transient = _describe_api_error(exc)
            except (HTTPError, OSError) as exc:  # refused, reset, timed out
                problem, transient = _describe_transport_error(exc, timeout), True
            else:
                try:
                    return json.loads(response.data or b"{}")
                except ValueError:  # a proxy's HTML error page, a truncated answer
                    problem, transient = "the answer is not JSON", True
            if not transient:
                raise AgentError(f"{what}: {problem}", permanent=True)
            pause = self.retry_delays[attempt] if attempt < len(self.retry_delays) else None
            if pause is None or time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
        raise AgentError(
            f"{what}: {problem} (gave up after {attempt + 1} attempts)", permanent=False
        )

    def _list(self, what: str, method: str, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """All items of a list call, following `continue` tokens page by page."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = self._call(
                what, method, *args, limit=self.list_page_size, _continue=token, **kwargs
            )
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    @property
    def _where(self) -> str:
        host = self.config.get("host") or self.config.get("kubeconfig") or "in-cluster config"
        return f"Kubernetes API ({host})"

    # --- discovery ----------------------------------------------------------------------------

    def discover(self) -> Discovery:
        """List nodes and the active pods on them; one HostFact per GPU node.

        Nodes without GPUs (and without GPU labels) are skipped. The whole source failing
        (unreachable, forbidden) comes back as `Discovery.error`; it never raises.
        """
        try:
            nodes = self._list(f"cannot list nodes from {self._where}", "list_node")
            pods = self._list(
                f"cannot list pods from {self._where}",
                "list_pod_for_all_namespaces",
                field_selector=_ACTIVE_SCHEDULED_PODS,
            )
        except AgentError as exc:
            return Discovery(error=exc.message)

        pods_by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name and is_active_pod(pod):
                pods_by_node[node_name].append(pod)

        hosts = []
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name") or "")
            try:
                host = node_to_host(node, pods_by_node.get(name, []))
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                # One malformed node must not hide the rest of the cluster.
                host = HostFact(name=name, state=HOST_OFFLINE, error=f"cannot read node: {exc}")
            if host.gpus or host.error:
                hosts.append(host)
        return Discovery(hosts=tuple(hosts))

    # --- binding ------------------------------------------------------------------------------

    def bind(self, request: BindRequest) -> BindingStatus:
        """Create the lease's pod on its node; idempotent.

        A second call for the same lease (a retried task) meets the first pod (409) and adopts
        it when it carries this lease's label; a pod of the same name that is not ours is a
        permanent error. The handle is `{namespace, name, node, uid, created_at}`.
        """
        spec = request.spec
        if spec.get("kind") != "pod":
            raise AgentError(
                f"a kubernetes source binds pods, not {spec.get('kind')!r}", permanent=True
            )
        namespace = str(spec.get("namespace") or self.namespace)
        if not _is_dns_label(namespace):
            raise AgentError(f"{namespace!r} is not a valid namespace name", permanent=True)
        pod = validate_pod(
            build_pod(
                lease_id=request.lease_id,
                host_name=request.host_name,
                gpu_uuids=request.gpu_uuids,
                manifest=spec.get("pod"),
                namespace=namespace,
                owner=f"gpupool source {self.name}",
            )
        )
        name = pod["metadata"]["name"]
        created = self._create_or_adopt(namespace, pod, request.lease_id)
        handle = {
            "namespace": namespace,
            "name": name,
            "node": request.host_name,
            "uid": (created.get("metadata") or {}).get("uid", ""),
            "created_at": datetime.now(UTC).isoformat(),
        }
        return self._status(created, handle)

    def _create_or_adopt(
        self, namespace: str, pod: dict[str, Any], lease_id: str
    ) -> dict[str, Any]:
        name = pod["metadata"]["name"]
        what = f"cannot create pod {namespace}/{name}"
        try:
            return self._call(what, "create_namespaced_pod", namespace, pod)
        except _Refused as exc:
            if exc.status == 404:  # the API says which: usually the namespace is missing
                raise AgentError(f"{what}: {exc.message}", permanent=True) from None
        # 409: the name is taken. Ours from an earlier try (the label says so) or someone else's.
        try:
            existing = self._call(
                f"cannot read pod {namespace}/{name}", "read_namespaced_pod", name, namespace
            )
        except _Refused as exc:
            # Deleted between our create and read: the caller's retry will create it afresh.
            raise AgentError(f"{what}: {exc.message}", permanent=False) from None
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if labels.get(LEASE_LABEL) != lease_label_value(lease_id):
            raise AgentError(
                f"{what}: a pod of that name already exists and does not belong to "
                f"lease {lease_id}",
                permanent=True,
            )
        return existing

    def observe(self, handle: Mapping[str, Any]) -> BindingStatus:
        """Read the pod and map its phase: Pending → starting (failed once it has been
        Pending longer than `pending_deadline_s`, with its events as the reason), Running →
        running, Succeeded → succeeded, Failed → failed with the container's exit code,
        404 → gone."""
        namespace, name = _handle_parts(handle)
        try:
            pod = self._call(
                f"cannot read pod {namespace}/{name}", "read_namespaced_pod", name, namespace
            )
        except _Refused as exc:
            if exc.status == 404:
                return BindingStatus(state=BIND_GONE, handle=handle, reason=_GONE_REASON)
            raise AgentError(
                f"cannot read {namespace}/{name}: {exc.message}", permanent=True
            ) from None
        return self._status(pod, handle)

    def unbind(self, handle: Mapping[str, Any], *, grace_s: int) -> None:
        """Delete the pod, giving its containers `grace_s` seconds after SIGTERM. A pod that
        is already gone counts as done, so calling this twice is fine."""
        namespace, name = _handle_parts(handle)
        try:
            self._call(
                f"cannot delete pod {namespace}/{name}",
                "delete_namespaced_pod",
                name,
                namespace,
                grace_period_seconds=max(0, int(grace_s)),
            )
        except _Refused as exc:
            if exc.status != 404:
                what = f"cannot delete {namespace}/{name}"
                raise AgentError(f"{what}: {exc.message}", permanent=True) from None

    # --- status mapping -----------------------------------------------------------------------

    def _status(self, pod: Mapping[str, Any], handle: Mapping[str, Any]) -> BindingStatus:
        def events() -> str:
            namespace, name = _handle_parts(handle)
            return self._events_text(namespace, name)

        return pod_status(pod, handle, pending_deadline_s=self.pending_deadline_s, events=events)

    def _events_text(self, namespace: str, name: str) -> str:
        """The pod's latest events in words; "" when there are none or they cannot be read
        (the deadline verdict must not fail because events are unavailable)."""
        try:
            events = self._list(
                f"cannot list events of pod {namespace}/{name}",
                "list_namespaced_event",
                namespace,
                field_selector=f"involvedObject.name={name}",
            )
        except (AgentError, _Refused):
            return ""
        return events_text(events, name)


# --- helpers --------------------------------------------------------------------------------------


class _Refused(Exception):
    """A 404 or 409 answer, which the calling verb turns into a meaning."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _handle_parts(handle: Mapping[str, Any]) -> tuple[str, str]:
    namespace, name = handle.get("namespace"), handle.get("name")
    if not namespace or not name:
        raise AgentError(
            f"binding handle without namespace and name: {dict(handle)}", permanent=True
        )
    return str(namespace), str(name)


def _is_dns_label(text: str) -> bool:
    return len(text) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", text) is not None


def _status_message(exc: Any) -> str:
    """The `message` of a `kind: Status` error body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or f"HTTP {exc.status} {exc.reason or ''}".strip())


def _describe_api_error(exc: Any) -> tuple[str, bool]:
    """(words, transient?) for an HTTP error answer."""
    status = int(exc.status or 0)
    message = _status_message(exc)
    if status == 0:  # TLS failure or a request the client could not build
        return f"request failed: {exc.reason}", False
    if status in (401, 403):
        return f"not allowed (HTTP {status}): {message}", False
    transient = status >= 500 or status == 429
    return f"API server answered HTTP {status}: {message}", transient


def _describe_transport_error(exc: Exception, timeout: float) -> str:
    reason = getattr(exc, "reason", None) or exc  # urllib3 wraps the cause in MaxRetryError
    name = type(reason).__name__
    text = str(reason).lower()
    if "timeout" in name.lower() or "timed out" in text:
        return f"no answer within {timeout:.1f} s"
    if "refused" in text:
        return "connection refused (is the API server running and the address right?)"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "the API server's host name does not resolve"
    return f"cannot reach the API server: {reason}"
