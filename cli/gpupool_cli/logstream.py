"""A workload's output, read through `GET leases/{id}/logs/` and passed on as it comes, across
broken streams (`gpupool run`, `gpupool logs`).

A followed log ends cleanly once the workload has ended (the server records that end on the lease
first). Anything else is a break, read again where it left off (resume.py says how, and how
exactly): a stream that ends without its last chunk (`ChunkedEncodingError`), a reset or refused
connection (the server restarting), a read timeout, a 502 `logs_unavailable`, a 429/503 over the
server's stream caps (after its Retry-After), and a clean end while the lease says the workload
still runs (a proxy that closed the answer). After a break the lease is read: if the workload has
ended meanwhile, one last read without `follow` passes on what is left, and the reading ends.

What retrying cannot cure (404: not yours or no such lease, 409 `no_workload`, 410 `logs_gone`, a
bad token) raises ApiError for the caller to word."""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import requests
import urllib3

from gpupool_cli.client import Client, api_error
from gpupool_cli.errors import ApiError, CliError
from gpupool_cli.resume import Printed, Resume
from gpupool_cli.waiting import ENDED

CHUNK = 64 * 1024
READ_S = 120.0  # a followed stream that sends nothing this long is read again (a quiet workload costs one read)
BACKOFF_S = (0.5, 5.0)  # first and longest wait between two failed reads
NOT_STARTED_S = 1.0  # a workload not started yet (409 workload_not_started) is asked for again this often
ONCE_TRIES = 5  # failed reads in a row before a read without follow gives up
RETRY = (429, 502, 503, 504)
BROKEN = (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError,
          requests.exceptions.Timeout, urllib3.exceptions.HTTPError)


class Sink:
    """Where the bytes go: a binary stream, flushed after each write. A reader that went away (a
    pipe into `head`) stops the writing, not the command: the lease is still followed to its end."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.closed = False
        self.first_at: float | None = None  # time.monotonic() of the first byte passed on

    @classmethod
    def stdout(cls, *, to_stderr: bool = False) -> Sink:
        text = sys.stderr if to_stderr else sys.stdout
        text.flush()  # what was printed as text first stays first
        return cls(text.buffer)

    def write(self, data: bytes) -> None:
        if not data or self.closed:
            return
        if self.first_at is None:
            self.first_at = time.monotonic()
        try:
            self.stream.write(data)
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            self.closed = True


class LogReader:
    """Reads one lease's log into `sink`. `is_over()`: whether the workload is known to have
    ended (asked after each break and each end); `note(text)`: a line for people (stderr)."""

    def __init__(self, client: Client, lease_id: str, sink: Sink, *, follow: bool, tail: int | None,
                 is_over: Callable[[], bool], note: Callable[[str], None]) -> None:
        self.client, self.lease_id, self.sink = client, lease_id, sink
        self.follow, self.tail = follow, tail
        self.is_over, self.note = is_over, note
        self.printed = Printed(from_start=tail is None)
        self.reconnects = 0  # reads after the first
        self.stopped = threading.Event()
        self._response: requests.Response | None = None

    def stop(self) -> None:
        """From another thread: end the reading. The read in progress ends at once: its socket is
        shut down for reading (closing it from here would wait for the read to return)."""
        self.stopped.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already released or closed: nothing is blocked
                response.raw.shutdown()

    def run(self) -> None:
        """Pass the log on: without follow what was written, with follow until the workload has
        ended (or `stop()`). Raises ApiError for what a retry cannot cure."""
        follow, failures = self.follow, 0
        while not self.stopped.is_set():
            try:
                if self._read(follow) and (not follow or self.is_over()):
                    return
                failures, wait = 0, NOT_STARTED_S  # a follow that ended while the workload runs on
            except ApiError as exc:
                failures += 1
                wait = self._wait_after(exc, follow, failures)
            except (CliError, *BROKEN) as exc:
                if isinstance(exc, CliError) and not exc.transient:
                    raise
                failures += 1
                wait = _backoff(failures)
            if self.stopped.is_set():
                return
            if follow and self.is_over():
                follow = False  # one last read of what is left
            elif not follow and failures >= ONCE_TRIES:
                raise CliError(f"could not read the log of lease {self.lease_id} after {failures} tries",
                               code="logs_unavailable", transient=True)
            self.reconnects += 1
            self.stopped.wait(wait)

    def _wait_after(self, exc: ApiError, follow: bool, failures: int) -> float:
        """How long to wait before reading again after an error answer; raises what is for good."""
        if exc.code == "workload_not_started" and follow:
            return NOT_STARTED_S
        if exc.status not in RETRY:
            raise exc
        retry_after = exc.details.get("retry_after")
        return float(retry_after) if isinstance(retry_after, int | float) else _backoff(failures)

    def _read(self, follow: bool) -> bool:
        """One read, resuming after what was passed on; True when its answer ended cleanly."""
        tail, resume = self.printed.resume(self.tail)
        params = {"follow": "true" if follow else "false"}
        if tail is not None:
            params["tail"] = str(tail)
        response = self.client.stream(f"leases/{self.lease_id}/logs/", params,
                                      read_timeout=READ_S if follow else 60.0)
        self._response = response
        try:
            if response.status_code >= 400:
                raise _error(response)
            # read1: what has come, as soon as some has (iter_content(None) reads a body that is not
            # chunked, behind a proxy or a WSGI server, to its end before giving any of it)
            while chunk := response.raw.read1(CHUNK):
                self._pass_on(chunk, resume)
            self._pass_on(b"", resume, end=True)
            return True
        finally:
            self._response = None
            response.close()

    def _pass_on(self, chunk: bytes, resume: Resume, *, end: bool = False) -> None:
        gap_before = resume.gap
        data = resume.end() if end else resume.feed(chunk)
        if resume.gap and not gap_before and self.printed.size:
            self.note(f"[gpupool: output of lease {self.lease_id[:8]} may be missing here: "
                      "it wrote more than was kept while the stream was down]")
            resume.gap = False
        self.printed.add(data)
        self.sink.write(data)


def _error(response: requests.Response) -> ApiError:
    """The answer's ApiError, its Retry-After (seconds) in `details['retry_after']`."""
    error = api_error(response)
    retry_after = response.headers.get("Retry-After", "")
    if retry_after.strip().isdigit():
        error.details = {**error.details, "retry_after": int(retry_after)}
    return error


def _backoff(failures: int) -> float:
    """0.5 s doubling to 5 s, jittered (readers of a restarted server do not come back at once)."""
    first, most = BACKOFF_S
    return float(min(most, first * 2 ** max(0, failures - 1)) * random.uniform(0.75, 1.25))


def workload_over(client: Client, lease_id: str) -> bool:
    """Whether the lease (hence its workload) has ended; False when the server cannot say now."""
    try:
        lease: dict[str, Any] = client.get(f"leases/{lease_id}/")
    except CliError as exc:
        return not exc.transient  # gone or no longer ours: nothing more to read
    return lease["state"] in ENDED
