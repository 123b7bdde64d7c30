"""`gpupool run -- CMD`: request GPUs, wait, run the command on them, pass its output on as it
comes, and exit with its exit code (or a code of our own saying how the lease ended instead).

The command runs as a `process` over SSH on the lease's host, or as a `pod` on its Kubernetes node
(`--image`, or a pool whose hosts are all Kubernetes nodes). Its output comes through the server's
log endpoint (logstream.py), so the client needs no SSH key or kubeconfig. Meanwhile the lease is
followed with long polls (and renewed before half its TTL is gone); Ctrl-C or SIGTERM releases it,
as does any error of ours while it is held."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

import click

from gpupool_cli.context import Ctx
from gpupool_cli.errors import (
    EXIT_ENDED,
    EXIT_EXPIRED,
    EXIT_FAILED,
    EXIT_LOST,
    EXIT_PREEMPTED,
    ApiError,
    CliError,
    Terminated,
    UsageError,
    stop_name,
)
from gpupool_cli.logstream import LogReader, Sink, workload_over
from gpupool_cli.options import current, global_options, key_values, lease_request_options
from gpupool_cli.output import parse_time
from gpupool_cli.requesting import cancel, create_lease, default_pool, request_body, wait_for_grant
from gpupool_cli.waiting import ENDED, HOLDING, Follower, StatusLine

DRAIN_S = 10.0  # once the workload stopped, how long its log may take to bring the last bytes
STOPPING_MAX_S = 900.0  # how long an ended lease's workload is read while it is being stopped
END_CODES = {"preempted": EXIT_PREEMPTED, "lost": EXIT_LOST, "expired": EXIT_EXPIRED, "failed": EXIT_FAILED}


def runs_pods(ctx: Ctx, opts: dict[str, Any]) -> bool:
    """Whether every host the lease may go to (its pool, `--source` and `--host`) is a Kubernetes
    node, so that only a pod can run there (False for a pool without hosts: the server says why)."""
    params: dict[str, Any] = {"pool": opts["pool"]}
    if len(opts["source"]) == 1:
        params["source"] = opts["source"][0]
    if opts["host"]:
        params["name"] = opts["host"]
    hosts = ctx.client.page("hosts/", max_rows=1, **params).count or 0
    return hosts > 0 and ctx.client.page("hosts/", max_rows=1, kind="kubernetes", **params).count == hosts


def workload_binding(ctx: Ctx, opts: dict[str, Any], command: list[str], env: dict[str, str],
                     image: str | None) -> dict[str, Any]:
    """The lease's binding: a pod of `image` when given, else a process, unless the pool runs only
    pods (then --image is needed)."""
    if image is None and runs_pods(ctx, opts):
        raise UsageError(f"pool {opts['pool']!r} runs pods (Kubernetes): say which container image with --image",
                         code="image_required")
    if image is None:
        return {"kind": "process", "command": command, "env": env}
    container: dict[str, Any] = {"name": "main", "image": image, "command": command}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"kind": "pod", "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpupool-run"},
                                   "spec": {"restartPolicy": "Never", "containers": [container]}}}


def exit_code(lease: dict[str, Any]) -> int:
    """The workload's exit code when it ended on its own; else the code of how the lease ended
    (errors.EXIT_CODES): preempted, lost, expired, failed, or released without one."""
    code = lease.get("exit_code")
    if not isinstance(code, int):
        code = ((lease.get("binding") or {}).get("status") or {}).get("exit_code")
    if isinstance(code, int):
        return min(max(code, 0), 255)
    return END_CODES.get(lease["state"], EXIT_ENDED)


@click.command("run", context_settings={"allow_interspersed_args": False})
@lease_request_options
@click.option("--env", multiple=True, metavar="KEY=VALUE", help="environment variable (repeatable)")
@click.option("--image", metavar="IMAGE", help="run it in a pod of this container image (Kubernetes pools)")
@click.option("--logs/--no-logs", default=True, show_default=True,
              help="pass the command's output on (stdout; stderr with -o json|yaml)")
@click.argument("workload", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND...")
@global_options
def cmd_run(env: tuple[str, ...], image: str | None, logs: bool, workload: tuple[str, ...], **opts: Any) -> int:
    """Request GPUs and run a command on them, as if it ran here:

        gpupool run --gpus 1 -- python train.py

    Its output (stdout and stderr, as `2>&1` would) comes as it is written; the command exits
    with its exit code, or 75-79 when the lease ended otherwise (see the table below). Ctrl-C or
    SIGTERM cancels the request, or releases the lease (ending the command) once it runs."""
    ctx = current()
    command = list(workload)
    if not command:
        raise UsageError("say what to run after --, e.g. gpupool run --gpus 1 -- python train.py")
    opts["pool"] = opts["pool"] or default_pool(ctx)
    binding = workload_binding(ctx, opts, command, key_values(env, "--env"), image)
    lease = create_lease(ctx, request_body(ctx, opts, binding))
    if not ctx.machine:
        ctx.note(f"requested lease {lease['id']}")
    lease = wait_for_grant(ctx, lease["id"], opts)
    lease = Run(ctx, lease, poll_s=opts["poll"], logs=logs).follow()
    code = exit_code(lease)
    if ctx.machine:
        ctx.dump(lease)
    else:
        said = f"lease {lease['state']}: {lease.get('reason') or ''}".rstrip(": ")
        ended_itself = isinstance(lease.get("exit_code"), int)
        ctx.note(said if ended_itself else f"{said} (exit {code})", style="" if ended_itself else "red")
    return code


class Run:
    """Following one granted lease to its end, its output passed on by a reader thread."""

    def __init__(self, ctx: Ctx, lease: dict[str, Any], *, poll_s: float, logs: bool) -> None:
        self.ctx, self.lease, self.poll_s, self.logs = ctx, lease, poll_s, logs
        self.line = StatusLine(ctx)
        self.follower = Follower(ctx, lease["id"], self.line, poll_s=poll_s)
        self.follower.last = lease
        self.reader: LogReader | None = None
        self._thread: threading.Thread | None = None

    def follow(self) -> dict[str, Any]:
        """The lease once ended. Ctrl-C, SIGTERM or an error of ours release it on the way out.
        A workload that ended before it was seen running has its output printed all at once."""
        lease = self.lease
        if lease["state"] in HOLDING and not self.ctx.machine:
            self.ctx.note(f"running on {lease['host']}: {', '.join(lease['gpus'])}", style="green")
        try:
            if self.logs and lease["state"] == "granted":
                with self.line:  # a live line until the workload starts; then its output has the terminal
                    lease = self.follower.until(lambda x: x["state"] == "bound" or x["state"] in ENDED,
                                                on_poll=self._heartbeat)
            if self.logs and lease["state"] == "bound":
                self._start_reader(follow=True)
                self.line = _QuietLine(self.ctx, started=self.line.started)
                self.follower = self._follower(self.line)
            if lease["state"] not in ENDED:
                with self.line:
                    lease = self.follower.until(lambda x: x["state"] in ENDED, on_poll=self._heartbeat)
        except (KeyboardInterrupt, Terminated) as stop:
            self._stop_reader()
            cancel(self.ctx, self.lease["id"], stop_name(stop), self.follower.last, self.line.waited)
            raise
        except Exception as exc:  # ours (a revoked token) or a bug: the GPUs must not stay held
            self._stop_reader()
            if self.follower.last is not None and self.follower.last["state"] in HOLDING:
                why = exc.message if isinstance(exc, CliError) else repr(exc)
                cancel(self.ctx, self.lease["id"], f"error: {why}", self.follower.last, self.line.waited)
            raise
        if self.logs and self.reader is None:  # it ended before it was seen running
            self._start_reader(follow=False)
        self._drain(lease)
        return lease

    def _follower(self, line: StatusLine) -> Follower:
        """A follower of the lease from where the last one left it (its last answer and ETag)."""
        follower = Follower(self.ctx, self.lease["id"], line, poll_s=self.poll_s)
        follower.last, follower.etag = self.follower.last, self.follower.etag
        return follower

    def _start_reader(self, *, follow: bool) -> None:
        ctx, lease_id = self.ctx, self.lease["id"]
        self.reader = LogReader(ctx.client, lease_id, Sink.stdout(to_stderr=ctx.machine), follow=follow, tail=None,
                                is_over=lambda: workload_over(ctx.client, lease_id), note=ctx.note)
        self._thread = threading.Thread(target=self._read, name="gpupool-logs", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.reader is not None
        if hasattr(signal, "pthread_sigmask"):
            # Ctrl-C and SIGTERM must reach the main thread at once: a signal the kernel gives this
            # thread would wait for the main thread's long poll to answer before its handler ran.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self.reader.run()
        except ApiError as exc:
            if exc.code not in ("workload_not_started", "no_workload"):  # it never ran: nothing to say
                self.ctx.note(f"cannot read the output of lease {self.lease['id']}: {exc.message} ({exc.code})",
                              style="yellow")
        except CliError as exc:
            self.ctx.note(f"cannot read the output of lease {self.lease['id']}: {exc.message} ({exc.code}); "
                          "following the lease to its end", style="yellow")
        except Exception as exc:  # the thread must say why the output stopped, not die silently
            self.ctx.note(f"reading the output of lease {self.lease['id']} failed: {exc!r}", style="yellow")

    def _drain(self, lease: dict[str, Any]) -> None:
        """Let the reader pass on the last bytes of an ended lease's workload: DRAIN_S once it is
        stopped, and for as long as it is being stopped (a preemption's grace: what it writes
        meanwhile, a checkpoint's messages, is shown), up to STOPPING_MAX_S. Not for a lost
        lease: its host is gone, and a stop there may never be confirmed."""
        if self._thread is None:
            return
        if lease["state"] == "lost":
            lease = {**lease, "stopping": None}
        now = time.monotonic()
        deadline, cap = now + DRAIN_S, now + STOPPING_MAX_S
        while self._thread.is_alive() and time.monotonic() < min(deadline, cap):
            self._thread.join(1.0)
            if lease.get("stopping") and self._thread.is_alive():
                with contextlib.suppress(CliError):  # the server away: the last answer stands
                    lease = self.ctx.client.get(f"leases/{lease['id']}/")
                if lease.get("stopping"):
                    deadline = time.monotonic() + DRAIN_S
        self._stop_reader()

    def _stop_reader(self) -> None:
        if self.reader is not None:
            self.reader.stop()

    def _heartbeat(self, lease: dict[str, Any]) -> None:
        """Renew a running lease once less than half its TTL is left: it lives as long as we follow.
        A failed renewal is tried again at the next answer (the lease has half its TTL left)."""
        expires = parse_time(lease.get("expires_at"))
        if lease["state"] not in HOLDING or expires is None:
            return
        if (expires - datetime.now(UTC)).total_seconds() < lease["ttl_seconds"] / 2:
            try:
                self.ctx.client.post(f"leases/{lease['id']}/renew/", {}, idempotent=True)
            except CliError as exc:
                if not exc.transient:
                    raise


class _QuietLine(StatusLine):
    """The status while the workload's output has the terminal: no live line (it would draw over
    the output), only the server's trouble said on stderr."""

    def __enter__(self) -> StatusLine:
        return self

    def show(self, text: str, *, state: str = "") -> None:
        self.text, self.state, self.trouble = text, state or self.state, ""


COMMANDS = (cmd_run,)
