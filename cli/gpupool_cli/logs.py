"""`gpupool logs ID [-f] [--tail N]`: a lease's workload output, through the server (no SSH key or
kubeconfig here), by id or id prefix, for any lease of the caller's teams, running or ended."""

from __future__ import annotations

from typing import Any

import click

from gpupool_cli.context import Ctx
from gpupool_cli.errors import ApiError, CliError, NotFound
from gpupool_cli.leases import resolve_lease
from gpupool_cli.logstream import LogReader, Sink, workload_over
from gpupool_cli.options import complete_leases, current, global_options
from gpupool_cli.waiting import Follower, StatusLine

NOT_STARTED = ("pending", "granted")


def _words(exc: ApiError, lease_id: str, follow: bool) -> CliError:
    """The log endpoint's refusals in the words of this command (and its exit codes)."""
    short = lease_id[:8]
    if exc.code == "no_workload":
        return CliError(f"lease {short} runs no workload (it was requested without a command; "
                        "`gpupool run` starts one)", code=exc.code)
    if exc.code == "workload_not_started":
        return CliError(f"lease {short}: {exc.message}" + ("" if follow else "; -f waits for it"), code=exc.code)
    if exc.code == "logs_gone":
        return NotFound(f"the log of lease {short} is gone: {exc.message}", code=exc.code)
    if exc.status == 404:
        return NotFound(f"no lease {lease_id} of yours", code=exc.code)
    if exc.code in ("logs_unavailable", "log_streams_busy", "too_many_log_streams"):
        return CliError(f"the log of lease {short} cannot be read now: {exc.message}; try again", code=exc.code)
    return exc


def _wait_for_start(ctx: Ctx, lease_id: str) -> None:
    """With -f on a lease whose workload has not started: follow the lease (a live line on a
    terminal) until it is bound or ended. Ctrl-C leaves the lease as it is (it is not ours to end)."""
    lease: dict[str, Any] = ctx.client.get(f"leases/{lease_id}/")
    if lease["state"] not in NOT_STARTED or not lease.get("binding"):
        return
    line = StatusLine(ctx)
    follower = Follower(ctx, lease_id, line, poll_s=1.0)
    follower.last = lease
    if not ctx.machine:
        ctx.note(f"lease {lease_id[:8]} is {lease['state']}: waiting for its workload to start")
    with line:
        follower.until(lambda x: x["state"] not in NOT_STARTED)


@click.command("logs")
@click.argument("lease_id", metavar="ID", shell_complete=complete_leases)
@click.option("-f", "--follow", is_flag=True, help="keep printing what it writes until it ends (like tail -f)")
@click.option("--tail", type=click.IntRange(0, 100_000), metavar="N",
              help="only the last N lines written so far (with -f, 0: only what comes next)")
@global_options
def cmd_logs(lease_id: str, follow: bool, tail: int | None) -> int:
    """The output of a lease's workload (stdout and stderr, as written). ID: the id, or a unique
    prefix as `ls` prints it.

    With -f a broken stream (a server restart, a proxy's 502) is read again where it left off."""
    ctx = current()
    lease_id = resolve_lease(ctx, lease_id)
    if follow:
        _wait_for_start(ctx, lease_id)
    reader = LogReader(ctx.client, lease_id, Sink.stdout(), follow=follow, tail=tail,
                       is_over=lambda: workload_over(ctx.client, lease_id), note=ctx.note)
    try:
        reader.run()
    except ApiError as exc:
        raise _words(exc, lease_id, follow) from exc
    return 0


COMMANDS = (cmd_logs,)
