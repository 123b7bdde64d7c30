"""A small REST client over requests: token auth, timeouts, bounded retries, one error type."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import requests

from gpupool_cli import __version__
from gpupool_cli.config import Config
from gpupool_cli.errors import ApiError, CliError

TIMEOUT = (5.0, 30.0)  # connect, read
RETRIES = 3  # connection failures only; an HTTP answer is never retried


class Client:
    def __init__(self, config: Config, *, session: requests.Session | None = None) -> None:
        self.base = config.url.rstrip("/") + "/api/v1/"
        self.session = session or requests.Session()
        self.session.headers.update({"Authorization": f"Token {config.token}", "Accept": "application/json",
                                     "User-Agent": f"gpupool-cli/{__version__}"})

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                json: Any = None, headers: dict[str, str] | None = None) -> Any:
        """One call; returns the decoded JSON body. GETs and keyed POSTs are retried on connection
        errors (a POST with an Idempotency-Key is safe to repeat); everything else is not."""
        url = path if path.startswith("http") else self.base + path.lstrip("/")
        retry = method == "GET" or bool(headers and "Idempotency-Key" in headers)
        for attempt in range(RETRIES if retry else 1):
            try:
                response = self.session.request(method, url, params=params, json=json, headers=headers,
                                                timeout=TIMEOUT)
                break
            except requests.ConnectionError as exc:
                if attempt + 1 >= (RETRIES if retry else 1):
                    raise CliError(f"cannot reach {self.base}{_why(exc)}", code="unreachable") from exc
                time.sleep(0.5 * 2**attempt)
            except requests.Timeout as exc:
                raise CliError(f"{self.base} did not answer in time", code="timeout") from exc
        if response.status_code >= 400:
            raise _api_error(response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise CliError(f"{url} answered something that is not JSON", code="bad_response") from exc

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v not in (None, "")})

    def post(self, path: str, body: Any = None, *, idempotent: bool = False) -> Any:
        headers = {"Idempotency-Key": str(uuid.uuid4())} if idempotent else None
        return self.request("POST", path, json=body if body is not None else {}, headers=headers)

    def iterate(self, path: str, *, limit: int = 1000, max_rows: int | None = None, **params: Any) -> Iterator[Any]:
        """Every row of a paginated list, following `next` (bounded by `max_rows`)."""
        page = self.get(path, limit=limit, **params)
        seen = 0
        while True:
            rows = page["results"] if isinstance(page, dict) and "results" in page else page
            for row in rows:
                yield row
                seen += 1
                if max_rows is not None and seen >= max_rows:
                    return
            nxt = page.get("next") if isinstance(page, dict) else None
            if not nxt:
                return
            page = self.request("GET", nxt)

    def all(self, path: str, **params: Any) -> list[Any]:
        return list(self.iterate(path, **params))


def _why(exc: Exception) -> str:
    """A few words instead of urllib3's nested repr."""
    text = str(exc).lower()
    for needle, words in (("refused", "connection refused"), ("name or service", "unknown host"),
                          ("nodename", "unknown host"), ("timed out", "timed out"), ("reset", "connection reset")):
        if needle in text:
            return f" ({words})"
    return ""


def _api_error(response: requests.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("message") or body.get("detail") or response.reason or "request failed")
    code = str(body.get("code") or f"http_{response.status_code}")
    return ApiError(message, code=code, status=response.status_code)
