"""Following a lease: a live status line while it is pending, and the workload while it runs.

On a terminal the line is redrawn in place with a spinner; on a pipe a plain line is printed each
time the status changes, so logs stay readable."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpupool_cli.context import Ctx
from gpupool_cli.errors import CliError
from gpupool_cli.output import format_duration, parse_time

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
HOLDING = ("granted", "bound")
ENDED = ("released", "expired", "preempted", "failed", "lost")


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
    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.last = ""
        self.tick = 0

    def show(self, text: str) -> None:
        if self.ctx.json:
            return
        if self.ctx.tty:
            self.tick += 1
            self.ctx.err.write(f"\r\x1b[2K{SPINNER[self.tick % len(SPINNER)]} {text}")
            self.ctx.err.flush()
        elif text != self.last:
            self.ctx.err.write(text + "\n")
            self.ctx.err.flush()
        self.last = text

    def done(self) -> None:
        if self.ctx.tty and not self.ctx.json and self.last:
            self.ctx.err.write("\r\x1b[2K")
            self.ctx.err.flush()


# Long-poll length: under the client's 30 s read timeout; shorter while pending so the queue
# position on the status line stays fresh.
WAIT_HOLDING_S = 25.0
WAIT_PENDING_S = 10.0


def _wait_for(lease: dict[str, Any], deadline: float | None) -> float:
    wait = WAIT_PENDING_S if lease["state"] == "pending" else WAIT_HOLDING_S
    if lease["state"] in HOLDING and lease.get("ttl_seconds"):
        wait = min(wait, lease["ttl_seconds"] / 4)  # the heartbeat must still come in time
    if deadline is not None:
        wait = min(wait, deadline - time.monotonic())
    return max(1.0, round(wait, 1))


def follow(ctx: Ctx, lease_id: str, *, until: Callable[[dict[str, Any]], bool], poll_s: float,
           timeout_s: float | None = None, on_poll: Callable[[dict[str, Any]], None] | None = None
           ) -> dict[str, Any]:
    """Follow the lease until `until(lease)` holds, showing its status; returns the last lease.

    Each read is a long poll (`?wait=&state=`): the server answers as soon as the state changes.
    A server that answers at once with nothing changed (one without long polls) is polled every
    `poll_s` instead. Raises CliError when `timeout_s` passes first. KeyboardInterrupt propagates
    (the caller cancels)."""
    sleep = ctx.sleep or time.sleep
    line = StatusLine(ctx)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    lease: dict[str, Any] | None = None
    try:
        while True:
            asked = time.monotonic()
            if lease is None:
                lease = ctx.client.get(f"leases/{lease_id}/")
                seen = None
            else:
                seen = lease["state"]
                lease = ctx.client.get(f"leases/{lease_id}/", wait=_wait_for(lease, deadline), state=seen)
            line.show(status_line(lease))
            if until(lease):
                return lease
            if on_poll is not None:
                on_poll(lease)
            if deadline is not None and time.monotonic() >= deadline:
                raise CliError(f"lease {lease_id} still {lease['state']} after {format_duration(timeout_s)}",
                               code="timeout")
            if seen is not None and lease["state"] == seen and time.monotonic() - asked < poll_s:
                sleep(poll_s)
    finally:
        line.done()
