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


class KubeApi:
    """The CoreV1Api of one source, JSON in and out.

    `config` is the source's entry: `kubeconfig` (path) with optional `context`, or
    `in_cluster: true`; `host` overrides the API URL (tests).
    """

    def __init__(self, config: Mapping[str, Any], retrying: Retrying) -> None:
        self.config = config
        self.retrying = retrying
        self._api_client: Any = None
        self._core_api: Any = None

    @property
    def where(self) -> str:
        host = self.config.get("host") or self.config.get("kubeconfig") or "in-cluster config"
        return f"Kubernetes API ({host})"

    def call(self, what: str, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call `CoreV1Api.<method>` and return the JSON answer as a dict.

        Transient failures are retried (see `Connector.retrying`), then raise
        AgentError(permanent=False). Other 4xx raise AgentError(permanent=True) with the API's
        own message. 404 and 409 raise `Refused`: callers give them a meaning.
        """
        api = self._api()

        def attempt(timeout: float) -> dict[str, Any]:
            return _request(api, what, method, timeout, *args, **kwargs)

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

    def close(self) -> None:
        """Drop the HTTP connection pool. A new one is built if used again."""
        if self._api_client is not None:
            self._api_client.close()
        self._api_client = self._core_api = None

    def _api(self) -> Any:
        """The CoreV1Api of this source's own ApiClient, built on first use."""
        if self._core_api is not None:
            return self._core_api
        from kubernetes import client

        configuration = client.Configuration()
        self._load_credentials(configuration)
        if self.config.get("host"):
            configuration.host = str(self.config["host"]).rstrip("/")
        # Retries belong to `retrying` (with backoff and a budget), not to urllib3's silent ones.
        configuration.retries = 0
        self._api_client = client.ApiClient(configuration)
        self._core_api = client.CoreV1Api(self._api_client)
        return self._core_api

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
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        response = getattr(api, method)(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
    except ApiException as exc:
        if exc.status in (404, 409):
            raise Refused(exc.status, status_message(exc)) from None
        problem, transient = _describe_api_error(exc)
        if not transient:
            raise AgentError(f"{what}: {problem}", permanent=True) from None
        raise RetryableError(problem, retry_after=retry_after_s(exc.headers)) from None
    except (HTTPError, OSError) as exc:  # refused, reset, timed out
        raise RetryableError(_describe_transport_error(exc, timeout)) from None
    try:
        answer = json.loads(response.data or b"{}")
    except ValueError:  # a proxy's HTML error page, a truncated answer
        raise RetryableError("the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise RetryableError("the answer is not a JSON object")
    return answer


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
