"""The one place that talks to a Kubernetes API server: built, bounded, retried, paged.

Uses the official `kubernetes` client (imported inside methods, so importing this module stays
cheap) through one fresh `ApiClient` per source: no global client configuration is read or
changed, so several clusters can be sources side by side.

Every call gets a per-request timeout and, for transient failures (5xx, 429, timeouts, refused
connections, an answer that is not JSON), the retries of the connector's `retrying` inside its
budget; then one AgentError with a sentence in words.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, TypeVar

from agents.base import AgentError, RetryableError

T = TypeVar("T")


class Retrying(Protocol):
    """`Connector.retrying`: the base class's timeouts, retries and budget."""

    def __call__(self, what: str, attempt: Callable[[float], T], *, timeout: float | None = None) -> T: ...


class Refused(Exception):
    """A 404 or 409 answer, which the calling verb turns into a meaning (gone, already exists)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


#: The client's API classes a source calls, in lookup order: a method name is looked up on each
#: (their method names do not overlap: `list_node` is core, `list_resource_slice` is DRA's).
API_CLASSES = ("CoreV1Api", "ResourceV1Api")


class KubeApi:
    """The CoreV1Api and ResourceV1Api (Dynamic Resource Allocation, `resource.k8s.io/v1`) of one
    source, JSON in and out.

    `config` is the source's entry: `kubeconfig` (path) with optional `context`, or
    `in_cluster: true`; `host` overrides the API URL (tests).
    """

    def __init__(self, config: Mapping[str, Any], retrying: Retrying) -> None:
        self.config = config
        self.retrying = retrying
        self._api_client: Any = None
        self._apis: tuple[Any, ...] = ()

    @property
    def where(self) -> str:
        host = self.config.get("host") or self.config.get("kubeconfig") or "in-cluster config"
        return f"Kubernetes API ({host})"

    def call(self, what: str, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call `<method>` of CoreV1Api (or, for DRA's methods, ResourceV1Api) and return the
        JSON answer as a dict.

        Transient failures are retried (see `Connector.retrying`), then raise
        AgentError(permanent=False). Other 4xx raise AgentError(permanent=True) with the API's
        own message. 404 and 409 raise `Refused`: callers give them a meaning.
        """
        api = self._api_with(method)

        def attempt(timeout: float) -> dict[str, Any]:
            return _request(api, what, method, timeout, *args, **kwargs)

        return self.retrying(what, attempt)

    def open_stream(self, what: str, method: str, *args: Any, read_timeout: float, **kwargs: Any) -> Any:
        """Call `<method>` and return the answer unread: the urllib3 response, whose body the
        caller reads as it comes (a pod's log) and closes. Its reads wait at most `read_timeout`
        seconds each (`shutdown()` of the response, from another thread, ends a wait at once).
        Errors as `call`'s, retried alike until the answer starts."""
        api = self._api_with(method)

        def attempt(timeout: float) -> Any:
            try:
                return _call(api, method, (timeout, read_timeout), *args, **kwargs)
            except _Answered as answered:  # an error answer: the same meaning as for `call`
                raise _refusal(what, answered.exc) from None

        return self.retrying(what, attempt)

    def list(self, what: str, method: str, *args: Any, page_size: int, **kwargs: Any) -> list[dict[str, Any]]:
        """All items of a list call, `page_size` at a time, following `continue` tokens."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = self.call(what, method, *args, limit=page_size, _continue=token, **kwargs)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def create_or_adopt(
        self,
        kind: str,
        namespace: str,
        obj: Mapping[str, Any],
        *,
        create: str,
        read: str,
        ours: Callable[[Mapping[str, Any]], bool],
        owner: str,
    ) -> dict[str, Any]:
        """Create `obj` (a `kind`, "pod") in `namespace`, or adopt the one of its name that a
        retried create finds (409) when `ours(existing)` says it is ours; `create` and `read`
        name the client methods. Someone else's object of that name is a permanent error that
        says it does not belong to `owner`; a 404 on create (no such namespace, or a type the
        cluster does not serve) is permanent too."""
        name = obj["metadata"]["name"]
        what = f"cannot create {kind} {namespace}/{name}"
        try:
            return self.call(what, create, namespace, obj)
        except Refused as exc:
            if exc.status == 404:  # the API says which: usually the namespace is missing
                raise AgentError(f"{what}: {exc.message}", permanent=True) from None
        try:
            existing = self.call(f"cannot read {kind} {namespace}/{name}", read, name, namespace)
        except Refused as exc:
            # Deleted between our create and read: the caller's retry will create it afresh.
            raise AgentError(f"{what}: {exc.message}", permanent=False) from None
        if not ours(existing):
            raise AgentError(
                f"{what}: a {kind} of that name already exists and does not belong to {owner}",
                permanent=True,
            )
        return existing

    def close(self) -> None:
        """Drop the HTTP connection pool. A new one is built if used again."""
        if self._api_client is not None:
            self._api_client.close()
        self._api_client, self._apis = None, ()

    def api_for(self, method: str) -> Any:
        """The client's API object that has `method`, for a call `call` cannot make (an exec's
        websocket stream)."""
        return self._api_with(method)

    def _api_with(self, method: str) -> Any:
        """The API object (of this source's own ApiClient, built on first use) that has `method`."""
        for api in self._api():
            if hasattr(api, method):
                return api
        raise AgentError(f"the Kubernetes client has no API call {method!r}", permanent=True)

    def _api(self) -> tuple[Any, ...]:
        """The API objects of this source's own ApiClient, built on first use."""
        if self._apis:
            return self._apis
        from kubernetes import client

        configuration = client.Configuration()
        self._load_credentials(configuration)
        if self.config.get("host"):
            configuration.host = str(self.config["host"]).rstrip("/")
        # Retries belong to `retrying` (with backoff and a budget), not to urllib3's silent ones.
        configuration.retries = 0
        self._api_client = client.ApiClient(configuration)
        self._apis = tuple(getattr(client, name)(self._api_client) for name in API_CLASSES)
        return self._apis

    def _load_credentials(self, configuration: Any) -> None:
        from kubernetes import config as kube_config

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


def _request(api: Any, what: str, method: str, timeout: float, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """One attempt of a call: RetryableError for what may pass, AgentError for what will not."""
    try:
        response = _call(api, method, timeout, *args, **kwargs)
    except _Answered as answered:
        raise _refusal(what, answered.exc) from None
    try:
        answer = json.loads(response.data or b"{}")
    except ValueError:  # a proxy's HTML error page, a truncated answer
        raise RetryableError("the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise RetryableError("the answer is not a JSON object")
    return answer


class _Answered(Exception):
    """The API server answered with an error status (`exc`: the client's ApiException)."""

    def __init__(self, exc: Any) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _call(api: Any, method: str, timeout: float | tuple[float, float], *args: Any, **kwargs: Any) -> Any:
    """Send one request; the unread urllib3 response. Raises _Answered for an error status,
    RetryableError when the server could not be reached or did not answer in time."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return getattr(api, method)(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
    except ApiException as exc:
        raise _Answered(exc) from None
    except (HTTPError, OSError) as exc:  # refused, reset, timed out
        seconds = timeout[0] if isinstance(timeout, tuple) else timeout
        raise RetryableError(_describe_transport_error(exc, seconds)) from None


def _refusal(what: str, exc: Any) -> Exception:
    """An error answer as what the verbs expect: Refused (404, 409), a permanent AgentError, or
    a RetryableError (5xx, 429)."""
    if exc.status in (404, 409):
        return Refused(exc.status, status_message(exc))
    problem, transient = _describe_api_error(exc)
    if not transient:
        return AgentError(f"{what}: {problem}", permanent=True)
    return RetryableError(problem, retry_after=retry_after_s(exc.headers))


def retry_after_s(headers: Any) -> float | None:
    """Seconds an answer's `Retry-After` header asks to wait (delay-seconds or an HTTP date,
    RFC 9110 10.2.3), or None when there is none or it cannot be read. An API server sends it
    with 429 (priority and fairness, eviction limits) and with some 503s."""
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(str(value))
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def status_message(exc: Any) -> str:
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
    message = status_message(exc)
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
