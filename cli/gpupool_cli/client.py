"""The REST client: requests with urllib3's Retry for backoff, token auth, one error type.

Two retry policies, both urllib3's `Retry` on the session's adapter (no hand-written loops):
- ordinary calls: a few tries with backoff on connection errors, read timeouts and 502/503/504
  (honouring Retry-After), for the calls that are safe to repeat: GETs, and POSTs that are
  idempotent (an `Idempotency-Key`, a release, a renew). Others are tried once past a refused
  connection (which never reached the server).
- `Client.patient(deadline)`: the same failures retried with capped backoff until a deadline
  (none: for ever), for waits that must outlive a server restart (`request --wait`, `run`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Self

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gpupool_cli import __version__
from gpupool_cli.config import Config
from gpupool_cli.errors import TRANSIENT_STATUS, ApiError, CliError

TIMEOUT = (5.0, 35.0)  # connect, read (a long poll answers within 25 s)
RETRIES = 3

def backoff(retry: type[Retry] = Retry, **kwargs: Any) -> Retry:
    """`retry(**kwargs)` with the backoff every call shares: 0.5 s doubling to 5 s, jittered (a
    fleet of clients reconnecting after a restart spreads out), on 502/503/504 too (Retry-After
    honoured); the last answer is returned, not raised, when the tries run out."""
    return retry(backoff_factor=0.5, backoff_max=5.0, backoff_jitter=0.25, status_forcelist=TRANSIENT_STATUS,
                 raise_on_status=False, **kwargs)

SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


class PatientRetry(Retry):
    """Retry that never runs out before `deadline` (time.monotonic(); None: never), and then does.
    `on_retry(why)` is told of each failure before the backoff sleep, for the status line."""

    def __init__(self, *args: Any, deadline: float | None = None,
                 on_retry: Callable[[str], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline
        self.on_retry = on_retry

    def new(self, **kw: Any) -> Self:
        fresh = super().new(**kw)
        fresh.deadline, fresh.on_retry = self.deadline, self.on_retry
        return fresh

    def is_exhausted(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def get_backoff_time(self) -> float:
        backoff = super().get_backoff_time()
        if self.deadline is None:
            return backoff
        return max(0.0, min(backoff, self.deadline - time.monotonic()))

    def increment(self, method: str | None = None, url: str | None = None, *args: Any, **kwargs: Any) -> Self:
        fresh = super().increment(method, url, *args, **kwargs)
        if self.on_retry is not None:
            last = fresh.history[-1] if fresh.history else None
            why = f"HTTP {last.status}" if last is not None and last.status else words(last.error if last else None)
            self.on_retry(why or "no answer")
        return fresh


def _session(retry: Retry, token: str) -> requests.Session:
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    # `Token`, not `Bearer`: servers before Bearer was accepted know only this one.
    session.headers.update({"Authorization": f"Token {token}", "Accept": "application/json",
                            "User-Agent": f"gpupool-cli/{__version__}"})
    return session


@dataclass
class Page:
    """Rows of a list and how many there are over all pages (`count`; None if not told)."""

    rows: list[Any]
    count: int | None

    @property
    def more(self) -> int:
        return max(0, (self.count or 0) - len(self.rows))


class Client:
    def __init__(self, config: Config, *, retry: Retry | None = None) -> None:
        self.config = config
        self.base = config.url.rstrip("/") + "/api/v1/"
        # Repeatable calls: every transient failure retried. Others: only a refused connection.
        self.session = _session(retry or backoff(total=RETRIES, allowed_methods=None), config.token)
        self.once = _session(backoff(total=RETRIES, connect=RETRIES, read=0, status=0, other=0, allowed_methods=None),
                             config.token)

    def patient(self, *, deadline: float | None, on_retry: Callable[[str], None] | None = None) -> Client:
        """A client whose repeatable calls are retried until `deadline` (None: for ever)."""
        return Client(replace(self.config), retry=backoff(PatientRetry, total=None, allowed_methods=None,
                                                          deadline=deadline, on_retry=on_retry))

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None, json: Any = None,
                headers: dict[str, str] | None = None, idempotent: bool = False,
                response_headers: dict[str, str] | None = None) -> Any:
        """One call; returns the decoded JSON body (None for an empty one) and fills
        `response_headers` when given. GETs and `idempotent` calls are retried (see the module)."""
        url = path if path.startswith("http") else self.base + path.lstrip("/")
        repeatable = method in SAFE or idempotent or bool(headers and "Idempotency-Key" in headers)
        session = self.session if repeatable else self.once
        try:
            response = session.request(method, url, params=params, json=json, headers=headers, timeout=TIMEOUT)
        except requests.Timeout as exc:
            raise CliError(f"{self.base} did not answer in time", code="timeout", transient=True) from exc
        except requests.ConnectionError as exc:
            raise CliError(f"cannot reach {self.base}{_why(exc)}", code="unreachable", transient=True) from exc
        except requests.RequestException as exc:
            raise CliError(f"{url}: {exc}", code="bad_response") from exc
        if response_headers is not None:
            response_headers.update(response.headers)
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
        """POST `body` ({} for none). `idempotent`: safe to repeat as it is (a release, a renew)."""
        return self.request("POST", path, json=body if body is not None else {}, idempotent=idempotent)

    def create(self, path: str, body: Any) -> Any:
        """A POST that makes something, under a fresh Idempotency-Key: repeating it after a lost
        answer returns the first one instead of making a second."""
        return self.request("POST", path, json=body, headers={"Idempotency-Key": str(uuid.uuid4())})

    def page(self, path: str, *, max_rows: int | None = None, **params: Any) -> Page:
        """The rows of a paginated list, following `next`, at most `max_rows` (None: all)."""
        rows: list[Any] = []
        count: int | None = None
        for row, total in self._rows(path, max_rows, **params):
            count = total
            rows.append(row)
            if max_rows is not None and len(rows) >= max_rows:
                break
        if count is None:  # an empty list still says how many there are
            count = 0
        return Page(rows, count)

    def _rows(self, path: str, max_rows: int | None, **params: Any) -> Iterator[tuple[Any, int | None]]:
        page = self.get(path, limit=min(1000, max_rows or 1000), **params)
        while True:
            rows = page["results"] if isinstance(page, dict) and "results" in page else page
            total = page.get("count") if isinstance(page, dict) else len(rows)
            for row in rows:
                yield row, total
            nxt = page.get("next") if isinstance(page, dict) else None
            if not nxt:
                return
            page = self.request("GET", nxt)

    def iterate(self, path: str, *, max_rows: int | None = None, **params: Any) -> Iterator[Any]:
        """Every row of a paginated list, following `next`, at most `max_rows` (None: all)."""
        for seen, (row, _) in enumerate(self._rows(path, max_rows, **params), start=1):
            yield row
            if max_rows is not None and seen >= max_rows:
                return

    def all(self, path: str, *, max_rows: int | None = None, **params: Any) -> list[Any]:
        return self.page(path, max_rows=max_rows, **params).rows


_WORDS = (("refused", "connection refused"), ("name or service", "unknown host"), ("nodename", "unknown host"),
          ("timed out", "timed out"), ("reset", "connection reset"), ("remotedisconnected", "connection closed"),
          ("aborted", "connection closed"), ("too many 50", "server errors"))


def words(exc: BaseException | None) -> str:
    """What went wrong in a few words instead of urllib3's nested repr ("" when unknown)."""
    text = str(exc).lower()
    return next((said for needle, said in _WORDS if needle in text), "")


def _why(exc: BaseException | None) -> str:
    said = words(exc)
    return f" ({said})" if said else ""


def _api_error(response: requests.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("message") or body.get("detail") or response.reason or "request failed")
    code = str(body.get("code") or f"http_{response.status_code}")
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    return ApiError(message, code=code, status=response.status_code, details=details)
