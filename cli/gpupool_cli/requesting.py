"""Asking for GPUs: `request` (and `--wait`); what `run -- CMD` (running.py) shares with it.

A wait outlives the server: transient failures are retried until the deadline (waiting.py). The
lease is cancelled only by the user, Ctrl-C or SIGTERM, or by `--timeout`, and the reason sent
with the cancel (kept in the lease's audit trail) says which, with what it was still waiting for."""

from __future__ import annotations

import time
from typing import Any

import click

from gpupool_cli.batch import create_leases, failure
from gpupool_cli.context import Ctx
from gpupool_cli.errors import ApiError, CliError, NotFound, Terminated, UsageError, WaitTimeout, stop_name
from gpupool_cli.leases import lease_block, leases_table
from gpupool_cli.options import current, global_options, key_values, lease_request_options
from gpupool_cli.output import format_duration, parse_duration
from gpupool_cli.waiting import ENDED, HOLDING, Follower, StatusLine

CANCEL_BUDGET_S = 30.0  # how long a cancel is retried while the server does not answer
MAX_REASON = 500  # the API's limit on a release reason


def default_pool(ctx: Ctx) -> str:
    """The server's only pool; a usage error when it has several, an error when none."""
    pools = [p["name"] for p in ctx.client.all("pools/")]
    if len(pools) == 1:
        return str(pools[0])
    if not pools:
        raise CliError("the server has no pools", code="no_pools")
    raise UsageError(f"several pools ({', '.join(pools)}): say which with --pool", code="pool_required")


def request_body(ctx: Ctx, opts: dict[str, Any], binding: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"pool": opts["pool"] or default_pool(ctx), "gpus": opts["gpus"],
                            "same_host": opts["same_host"]}
    if opts["ttl"]:
        body["ttl_seconds"] = parse_duration(opts["ttl"])
    for key, value in (("model", opts["model"]), ("team", opts["team"]), ("priority_class", opts["priority"]),
                       ("min_memory_mb", opts["min_memory"])):
        if value not in (None, ""):
            body[key] = value
    if binding is not None:
        body["binding"] = binding
    selector = _selector(opts)
    if selector:
        body["selector"] = selector
    if opts.get("topology"):
        body["topology"] = topology_option(opts["topology"])
    return body


def topology_option(text: str) -> dict[str, str]:
    """`--topology rack`, `rack:required`, `nvlink:preferred` as the lease's topology object."""
    within, _, mode = text.partition(":")
    if not within.strip() or mode.strip() not in ("", "required", "preferred"):
        raise UsageError(f"--topology takes LEVEL[:required|preferred], got {text!r}")
    return {"within": within.strip(), "mode": mode.strip() or "preferred"}


def _selector(opts: dict[str, Any]) -> dict[str, Any]:
    """`--source`, `--host` and `--label k=v` as the lease's selector ({} for none)."""
    selector: dict[str, Any] = {}
    sources = list(opts["source"])
    if sources:
        selector["source"] = sources[0] if len(sources) == 1 else sources
    if opts["host"]:
        selector["host"] = opts["host"]
    labels = key_values(opts["label"], "--label")
    if labels:
        selector["labels"] = labels
    return selector


def create_lease(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    """POST leases/ under an Idempotency-Key (a retry after a lost answer finds the same lease).
    An unknown pool is NotFound (exit 3), as an unknown team or priority class is."""
    try:
        lease: dict[str, Any] = ctx.client.create("leases/", body)
    except ApiError as exc:
        if exc.status == 400 and "does not exist" in str(exc.details.get("pool", "")):
            raise NotFound(f"pool {body['pool']!r} does not exist", code="unknown_pool") from exc
        raise
    return lease


def cancel_reason(why: str, last: dict[str, Any] | None, waited: float) -> str:
    """The audit reason of a cancel: who stopped the wait, after how long, and what the lease was
    still waiting for (its queue position and the scheduler's reason)."""
    if last is not None and last["state"] in HOLDING:
        return f"released from the CLI: {why} while the workload ran ({format_duration(waited)})"[:MAX_REASON]
    text = f"cancelled from the CLI: {why} after {format_duration(waited)} waiting"
    if last is not None and last["state"] == "pending":
        pos = last.get("queue_position")
        text += f"; it was pending ({f'#{pos} in queue' if pos else 'queued'})"
        if last.get("reason"):
            text += f": {last['reason']}"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def cancel(ctx: Ctx, lease_id: str, why: str, last: dict[str, Any] | None, waited: float) -> None:
    """Cancel (release) the lease, retried for a while if the server does not answer; says so
    either way on stderr."""
    reason = cancel_reason(why, last, waited)
    client = ctx.client.patient(deadline=time.monotonic() + CANCEL_BUDGET_S)
    try:
        client.request("POST", f"leases/{lease_id}/release/", json={"reason": reason}, idempotent=True)
    except CliError as exc:
        ctx.note(f"could not cancel lease {lease_id}: {exc.line()}; cancel it with `gpupool cancel {lease_id[:8]}`",
                 style="red")
        return
    verb = "released" if last is not None and last["state"] in HOLDING else "cancelled"
    ctx.note(f"{verb} lease {lease_id} ({why})", style="yellow")


def _timeout(opts: dict[str, Any]) -> float | None:
    return float(parse_duration(opts["timeout"])) if opts.get("timeout") else None


def wait_for_grant(ctx: Ctx, lease_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Follow a new lease until it is granted or ends; returns it. Past `--timeout`, or on Ctrl-C
    or SIGTERM, the lease is cancelled (the reason says which) and the exception goes on up."""
    line = StatusLine(ctx)
    follower = Follower(ctx, lease_id, line, poll_s=opts["poll"], timeout_s=_timeout(opts))
    try:
        with line:
            return follower.until(lambda x: x["state"] in HOLDING or x["state"] in ENDED)
    except WaitTimeout:
        cancel(ctx, lease_id, f"--timeout {opts['timeout']} passed", follower.last, line.waited)
        raise
    except (KeyboardInterrupt, Terminated) as stop:
        cancel(ctx, lease_id, stop_name(stop), follower.last, line.waited)
        raise


@click.command("request")
@lease_request_options
@click.option("--wait", is_flag=True, help="wait until granted, with the queue position (Ctrl-C cancels)")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="make this many identical leases, in batches of 1,000 a call (not with --wait)")
@global_options
def cmd_request(wait: bool, count: int, **opts: Any) -> int:
    """Request GPUs; --wait until granted; --count N leases at once."""
    ctx = current()
    if count > 1:
        return _request_many(ctx, opts, count, wait)
    lease = create_lease(ctx, request_body(ctx, opts))
    if not wait:
        ctx.emit(lease, lambda: lease_block(lease))
        return 0
    if not ctx.machine:
        ctx.note(f"requested lease {lease['id']}")
    lease = wait_for_grant(ctx, lease["id"], opts)
    ctx.emit(lease, lambda: lease_block(lease))
    if lease["state"] in ENDED:
        raise CliError(f"lease {lease['id']} {lease['state']}: {lease.get('reason') or ''}".rstrip(": "),
                       code=f"lease_{lease['state']}")
    return 0


def _request_many(ctx: Ctx, opts: dict[str, Any], count: int, wait: bool) -> int:
    """`request --count N`: the leases made (a list: JSON, YAML or a table); an error naming how many
    failed and why when some did (exit code of the first item's error)."""
    if wait:
        raise UsageError("--wait follows one lease: leave it out with --count (`gpupool ls` shows them)",
                         code="wait_with_count")
    leases, failed = create_leases(ctx, request_body(ctx, opts), count)
    if leases:
        ctx.emit(leases, lambda: leases_table(leases, wide=ctx.wide, headers=not ctx.no_headers))
    if failed:
        raise failure(failed, count)
    return 0


COMMANDS = (cmd_request,)
