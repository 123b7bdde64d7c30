"""Following a lease: a live status line while it waits (and while its workload runs), through long
polls that outlive the server.

On a terminal the line is a Rich Live display on stderr: spinner, the lease's state, queue
position, estimated start and reason, and the time waited, redrawn four times a second. On a pipe
one plain line is printed each time the status changes, so logs stay readable.

Transient failures (the server restarting, a proxy's 502/503/504, a timeout) are retried with
backoff by the client (`Client.patient`) until the caller's deadline; they never end the wait.
Only the deadline, Ctrl-C or SIGTERM do, and the caller decides what happens to the lease."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from gpupool_cli.context import Ctx
from gpupool_cli.errors import CliError, WaitTimeout
from gpupool_cli.output import STATE_STYLES, format_clock, format_duration, parse_time

HOLDING = ("granted", "bound")
ENDED = ("released", "expired", "preempted", "failed", "lost")

# Long-poll length. A server that sends an ETag wakes a long poll on any change of the lease
# (state, reason, queue position, estimated start), so the poll may be long; one that does not
# wakes only on a change of state, so the line's reason would lag: poll it more often.
WAIT_S = 25.0
WAIT_STATE_ONLY_S = 10.0


def status_line(lease: dict[str, Any]) -> str:
    state = lease["state"]
    if state == "pending":
        pos = lease.get("queue_position")
        where = f"#{pos} in queue" if pos else "queued"
        eta = parse_time(lease.get("estimated_start"))
        eta_text = ""
        if eta is not None:
            eta_text = f", starts in ~{format_duration(max(0.0, (eta - datetime.now(UTC)).total_seconds()))}"
        return f"pending ({where}{eta_text}): {lease.get('reason') or 'waiting for a scheduling pass'}"
    if state in HOLDING:
        gpus = len(lease.get("gpus") or [])
        warning = f" (WARNING {lease['warning']})" if lease.get("warning") else ""
        return f"{state}: {gpus} GPU(s) on {lease.get('host') or '?'}{warning}"
    return f"{state}: {lease.get('reason') or ''}".rstrip(": ")


class StatusLine:
    """The line of one wait; a context manager (the live display runs inside it)."""

    def __init__(self, ctx: Ctx, *, started: float | None = None) -> None:
        self.ctx = ctx
        self.started = time.monotonic() if started is None else started
        self.text = ""
        self.state = ""
        self.trouble = ""  # the server's failure being retried ("" when it answers)
        self._printed = ""
        self._spinner = Spinner("dots")
        self._live: Live | None = None

    def __enter__(self) -> StatusLine:
        if self.ctx.err.is_terminal and not self.ctx.machine:
            self._live = Live(console=self.ctx.err, get_renderable=self._render, refresh_per_second=4,
                              transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    @property
    def waited(self) -> float:
        return time.monotonic() - self.started

    def show(self, text: str, *, state: str = "") -> None:
        self.text, self.state, self.trouble = text, state or self.state, ""
        self._plain()

    def retrying(self, why: str) -> None:
        """The server did not answer (`why`); the client retries."""
        self.trouble = f"server not answering ({why}); retrying"
        self._plain()

    def _plain(self) -> None:
        """On a pipe: a line when what it says changes (the time waited alone does not count)."""
        if self._live is not None or self.ctx.machine:
            return
        said = f"{self.trouble} — {self.text}" if self.trouble else self.text
        if said and said != self._printed:
            self._printed = said
            self.ctx.note(said)

    def _render(self) -> RenderableType:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(self.text or "asking the server", style=STATE_STYLES.get(self.state, ""))
        line.append(f"  {format_clock(self.waited)}", style="dim")
        if self.trouble:
            line.append(f"  {self.trouble}", style="yellow")
        self._spinner.text = line
        return self._spinner


class Follower:
    """Follows one lease with long polls; `last` is the lease as last seen (None before the first
    answer), for the caller's messages and cancel reason."""

    def __init__(self, ctx: Ctx, lease_id: str, line: StatusLine, *, poll_s: float,
                 timeout_s: float | None = None) -> None:
        self.ctx, self.lease_id, self.line, self.poll_s = ctx, lease_id, line, poll_s
        self.timeout_s = timeout_s
        self.deadline = None if timeout_s is None else line.started + timeout_s
        self.client = ctx.client.patient(deadline=self.deadline, on_retry=line.retrying)
        self.last: dict[str, Any] | None = None
        self.etag = ""

    def until(self, done: Callable[[dict[str, Any]], bool],
              on_poll: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Follow until `done(lease)`; returns that lease. Raises WaitTimeout when the deadline
        passes first, CliError for a permanent failure (a 404: the lease is gone,
        a 401: the token was revoked). KeyboardInterrupt and Terminated propagate."""
        sleep = self.ctx.sleep or time.sleep
        while True:
            asked = time.monotonic()
            before = (self.last or {}).get("state"), self.etag
            lease = self._read()
            if lease is not None:
                self.last = lease
                self.line.show(status_line(lease), state=lease["state"])
                if done(lease):
                    return lease
                if on_poll is not None:
                    on_poll(lease)
            self._check_deadline()
            unchanged = lease is None or (lease["state"], self.etag) == before
            if unchanged and time.monotonic() - asked < self.poll_s:
                sleep(self.poll_s)  # an answer at once with nothing new: a server without long polls

    def _read(self) -> dict[str, Any] | None:
        headers: dict[str, str] = {}
        params: dict[str, Any] | None = None
        if self.last is not None:
            params = {"wait": self._wait_s(), "state": self.last["state"]}
            if self.etag:
                params["seen"] = self.etag
        try:
            lease: dict[str, Any] = self.client.request("GET", f"leases/{self.lease_id}/", params=params,
                                                        response_headers=headers)
        except CliError as exc:
            if not exc.transient:
                raise
            self.line.retrying(exc.message)
            return None
        self.etag = headers.get("ETag", "").strip('"')
        return lease

    def _wait_s(self) -> float:
        assert self.last is not None
        wait = WAIT_S if self.etag else WAIT_STATE_ONLY_S
        if self.last["state"] in HOLDING and self.last.get("ttl_seconds"):
            wait = min(wait, self.last["ttl_seconds"] / 4)  # the heartbeat must still come in time
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
        return max(1.0, round(wait, 1))

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            state = (self.last or {}).get("state", "unknown")
            raise WaitTimeout(f"lease {self.lease_id} still {state} after {format_duration(self.timeout_s)}")
