"""Lease commands: request (and --wait), run, ls, show, renew, release."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime
from typing import Any

from gpupool_cli.context import Ctx
from gpupool_cli.errors import EXIT_API, EXIT_INTERRUPTED, ApiError, CliError, UsageError
from gpupool_cli.output import age, keyvalues, parse_duration, parse_time, table, to_json, until
from gpupool_cli.waiting import ENDED, HOLDING, follow

UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def lease_block(lease: dict[str, Any]) -> str:
    binding = lease.get("binding") or {}
    status = binding.get("status") or {}
    pairs: list[tuple[str, Any]] = [
        ("id", lease["id"]), ("state", lease["state"]), ("reason", lease.get("reason")),
        *([("WARNING", lease["warning"])] if lease.get("warning") else []),
        *([("idle exempt", True)] if lease.get("idle_exempt") else []),
        ("team", lease["team"]), ("user", lease["user"]), ("pool", lease["pool"]),
        ("gpus", f"{len(lease.get('gpus') or [])}/{lease['gpu_count']}"),
        ("host", lease.get("host")), ("model", lease.get("model") or "any"),
        ("priority", lease["priority_class"]), ("borrowed", lease.get("borrowed")),
        ("queue position", lease.get("queue_position")), ("estimated start", lease.get("estimated_start")),
        ("created", f"{lease['created_at']} ({age(lease['created_at'])} ago)"),
        ("granted", lease.get("granted_at")),
        ("expires", f"{lease['expires_at']} (in {until(lease['expires_at'])})" if lease.get("expires_at") else None),
        ("ended", lease.get("ended_at")),
    ]
    if binding:
        pairs.append(("binding", f"{binding.get('kind')}: {status.get('state', '-')}"
                      + (f" (exit code {status['exit_code']})" if status.get("exit_code") is not None else "")))
    stopping = lease.get("stopping")
    if stopping and stopping.get("attempts"):
        pairs.append(("stopping", f"GPUs held: {stopping['attempts']} failed attempt(s), last: "
                      f"{stopping.get('last_error')}; next at {stopping.get('next_attempt_at') or '-'}"))
    text = keyvalues(pairs)
    if lease.get("gpus"):
        text += "\n" + "\n".join(f"  {uuid}" for uuid in lease["gpus"])
    return text


def _default_pool(ctx: Ctx) -> str:
    pools = [p["name"] for p in ctx.client.all("pools/")]
    if len(pools) == 1:
        return str(pools[0])
    if not pools:
        raise CliError("the server has no pools", code="no_pools")
    raise UsageError(f"several pools ({', '.join(pools)}): say which with --pool", code="pool_required")


def request_body(ctx: Ctx, args: argparse.Namespace, binding: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"pool": args.pool or _default_pool(ctx), "gpus": args.gpus,
                            "same_host": not args.spread}
    if args.ttl:
        body["ttl_seconds"] = parse_duration(args.ttl)
    for key, value in (("model", args.model), ("team", args.team), ("priority_class", args.priority),
                       ("min_memory_mb", args.min_memory)):
        if value not in (None, ""):
            body[key] = value
    if binding is not None:
        body["binding"] = binding
    selector = _selector(args)
    if selector:
        body["selector"] = selector
    return body


def _selector(args: argparse.Namespace) -> dict[str, Any]:
    """`--source`, `--host` and `--label k=v` as the lease's selector ({} for none)."""
    selector: dict[str, Any] = {}
    sources = getattr(args, "source", None) or []
    if sources:
        selector["source"] = sources[0] if len(sources) == 1 else sources
    if getattr(args, "host", None):
        selector["host"] = args.host
    labels = {}
    for item in getattr(args, "label", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--label takes KEY=VALUE, got {item!r}")
        labels[key] = value
    if labels:
        selector["labels"] = labels
    return selector


def _cancel(ctx: Ctx, lease_id: str) -> None:
    try:
        ctx.client.post(f"leases/{lease_id}/release/", {"reason": "cancelled from the CLI (interrupted)"})
        ctx.err.write(f"\ncancelled lease {lease_id}\n")
    except CliError as exc:
        ctx.err.write(f"\ncould not cancel lease {lease_id}: {exc.line()}\n")


def _wait_timeout(args: argparse.Namespace) -> float | None:
    return float(parse_duration(args.timeout)) if getattr(args, "timeout", None) else None


def cmd_request(ctx: Ctx, args: argparse.Namespace) -> int:
    lease = ctx.client.post("leases/", request_body(ctx, args), idempotent=True)
    if not args.wait:
        ctx.emit(lease, lambda: lease_block(lease))
        return 0
    if not ctx.json:
        ctx.err.write(f"requested lease {lease['id']}\n")
    try:
        lease = follow(ctx, lease["id"], until=lambda x: x["state"] in HOLDING or x["state"] in ENDED,
                       poll_s=args.poll, timeout_s=_wait_timeout(args))
    except KeyboardInterrupt:
        _cancel(ctx, lease["id"])
        return EXIT_INTERRUPTED
    except CliError:
        _cancel(ctx, lease["id"])
        raise
    ctx.emit(lease, lambda: lease_block(lease))
    if lease["state"] in ENDED:
        raise CliError(f"lease {lease['id']} {lease['state']}: {lease.get('reason') or ''}".rstrip(": "),
                       code=f"lease_{lease['state']}")
    return 0


def _exit_code(lease: dict[str, Any]) -> int:
    """The workload's exit code when known; else 0 for a clean release, 1 for any other end."""
    status = (lease.get("binding") or {}).get("status") or {}
    if isinstance(status.get("exit_code"), int):
        return min(max(int(status["exit_code"]), 0), 255)
    return 0 if lease["state"] == "released" else EXIT_API


def cmd_run(ctx: Ctx, args: argparse.Namespace) -> int:
    command = list(args.workload)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("say what to run after --, e.g. gpupool run --gpus 1 -- python train.py")
    env = {}
    for item in args.env or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env takes KEY=VALUE, got {item!r}")
        env[key] = value
    binding = {"kind": "process", "command": command, "env": env}
    lease = ctx.client.post("leases/", request_body(ctx, args, binding), idempotent=True)
    lease_id = lease["id"]
    if not ctx.json:
        ctx.err.write(f"requested lease {lease_id}\n")
    try:
        lease = follow(ctx, lease_id, until=lambda x: x["state"] in HOLDING or x["state"] in ENDED,
                       poll_s=args.poll, timeout_s=_wait_timeout(args))
        if lease["state"] in HOLDING and not ctx.json:
            ctx.err.write(f"running on {lease['host']}: {', '.join(lease['gpus'])}\n")
        lease = follow(ctx, lease_id, until=lambda x: x["state"] in ENDED, poll_s=args.poll,
                       on_poll=lambda x: _heartbeat(ctx, x))
    except KeyboardInterrupt:
        _cancel(ctx, lease_id)
        return EXIT_INTERRUPTED
    if ctx.json:
        ctx.print(to_json(lease))
    else:
        ctx.err.write(f"lease {lease['state']}: {lease.get('reason') or ''}\n")
    return _exit_code(lease)


def _heartbeat(ctx: Ctx, lease: dict[str, Any]) -> None:
    """Renew a running lease once less than half its TTL is left: it lives as long as we follow."""
    expires = parse_time(lease.get("expires_at"))
    if lease["state"] not in HOLDING or expires is None:
        return
    left = (expires - datetime.now(UTC)).total_seconds()
    if left < lease["ttl_seconds"] / 2:
        ctx.client.post(f"leases/{lease['id']}/renew/", {})


def resolve_lease(ctx: Ctx, text: str) -> str:
    """A full id, or a unique prefix of one of the caller's leases (as `ls` prints them)."""
    if UUID.match(text):
        return text
    if not re.fullmatch(r"[0-9a-fA-F-]{4,36}", text):
        raise UsageError(f"not a lease id: {text!r}")
    matches = [lease["id"] for lease in ctx.client.iterate("leases/", max_rows=5000)
               if lease["id"].startswith(text.lower())]
    if not matches:
        raise ApiError(f"no lease of yours starts with {text!r}", code="not_found", status=404)
    if len(matches) > 1:
        raise UsageError(f"{text!r} matches {len(matches)} leases; give more of the id", code="ambiguous")
    return str(matches[0])


def cmd_ls(ctx: Ctx, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"state": args.state} if args.state else ({} if args.all else {"active": "true"})
    leases = list(ctx.client.iterate("leases/", max_rows=args.limit, **params))
    rows = [[x["id"][:8], x["state"], x["team"], x["user"], x["pool"], x["gpu_count"], x.get("host"),
             x.get("model"), x["priority_class"], age(x["created_at"]),
             until(x.get("expires_at")) if x["state"] in HOLDING else "-", reason_cell(x)] for x in leases]
    ctx.emit(leases, lambda: table(["ID", "STATE", "TEAM", "USER", "POOL", "GPUS", "HOST", "MODEL", "PRIORITY",
                                    "AGE", "EXPIRES IN", "REASON"], rows))
    return 0


def reason_cell(lease: dict[str, Any]) -> str | None:
    """The REASON of a list row: a standing warning (idle reclaim) first, marked, else the reason."""
    warning = lease.get("warning")
    return f"WARNING {warning}" if warning else lease.get("reason")


def cmd_show(ctx: Ctx, args: argparse.Namespace) -> int:
    lease_id = resolve_lease(ctx, args.id)
    lease = ctx.client.get(f"leases/{lease_id}/")
    events = ctx.client.get(f"leases/{lease_id}/events/")
    rows = [[e["at"][:19].replace("T", " "), e["actor"], e["action"], e["message"]] for e in events]
    ctx.emit({**lease, "events": events},
             lambda: lease_block(lease) + "\n\naudit trail\n" + table(["AT (UTC)", "ACTOR", "ACTION", "MESSAGE"],
                                                                      rows, max_width=90))
    return 0


def cmd_renew(ctx: Ctx, args: argparse.Namespace) -> int:
    lease_id = resolve_lease(ctx, args.id)
    body = {"ttl_seconds": parse_duration(args.ttl)} if args.ttl else {}
    lease = ctx.client.post(f"leases/{lease_id}/renew/" + ("?keep=true" if args.keep else ""), body)
    ctx.emit(lease, lambda: f"lease {lease['id']} renewed: expires {lease.get('expires_at') or '-'}"
             f" (in {until(lease.get('expires_at'))})")
    return 0


def cmd_release(ctx: Ctx, args: argparse.Namespace) -> int:
    lease_id = resolve_lease(ctx, args.id)
    lease = ctx.client.post(f"leases/{lease_id}/release/", {"reason": args.reason} if args.reason else {})
    ctx.emit(lease, lambda: f"lease {lease['id']} {lease['state']}: {lease.get('reason') or ''}".rstrip(": "))
    return 0
