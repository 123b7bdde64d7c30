"""Lease commands that read or end one lease, or list many: ls, show, renew, release, cancel.

A lease is named by its id or a unique prefix of it (the 8 characters `ls` prints), looked up by
the server (`GET leases/?id_prefix=`), so any lease of the caller's teams is found, however old."""

from __future__ import annotations

import re
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

from gpupool_cli.context import Ctx
from gpupool_cli.errors import NotFound, UsageError
from gpupool_cli.options import complete_leases, current, global_options, no_headers_option
from gpupool_cli.output import Column, age, keyvalues, parse_duration, table, until
from gpupool_cli.waiting import HOLDING
from gpupool_cli.watching import interval_option, watch_option, watched

UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
PREFIX = re.compile(r"[0-9a-fA-F-]{4,36}")
STATES = ("pending", "granted", "bound", "released", "expired", "preempted", "failed", "lost")
DEFAULT_LIMIT = 500


def lease_block(lease: dict[str, Any]) -> Text:
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
        text.append("\n" + "\n".join(f"  {uuid}" for uuid in lease["gpus"]))
    return text


def resolve_lease(ctx: Ctx, text: str) -> str:
    """A full id, or a unique prefix of one of the caller's leases. No match is NotFound (exit 3);
    several are a usage error (exit 2) that names a few of them."""
    if UUID.match(text):
        return text
    if not PREFIX.fullmatch(text):
        raise UsageError(f"not a lease id: {text!r}")
    page = ctx.client.page("leases/", max_rows=5, id_prefix=text.lower())
    if not page.rows:
        raise NotFound(f"no lease of yours starts with {text!r}")
    if len(page.rows) > 1:
        some = ", ".join(f"{x['id'][:13]} ({x['state']}, {age(x['created_at'])} old)" for x in page.rows[:3])
        raise UsageError(f"{text!r} matches {page.count} leases ({some}{', …' if (page.count or 0) > 3 else ''}); "
                         "give more of the id", code="ambiguous")
    return str(page.rows[0]["id"])


def reason_cell(lease: dict[str, Any]) -> str | None:
    """The REASON of a list row: a standing warning (idle reclaim) first, marked, else the reason."""
    warning = lease.get("warning")
    return f"WARNING {warning}" if warning else lease.get("reason")


def _expires(lease: dict[str, Any]) -> str:
    return until(lease.get("expires_at")) if lease["state"] in HOLDING else "-"


def leases_table(leases: list[dict[str, Any]], *, wide: bool, headers: bool = True) -> RenderableType:
    state = Column("STATE", state=True)
    if wide:
        return table(["ID", state, "TEAM", "USER", "POOL", "GPUS", "HOST", "MODEL", "PRIORITY", "AGE", "EXPIRES IN",
                      "QUEUE", "EST. START", "BINDING", Column("REASON", max_width=120), "GPU UUIDS"],
                     [[x["id"], x["state"], x["team"], x["user"], x["pool"], x["gpu_count"], x.get("host"),
                       x.get("model"), x["priority_class"], age(x["created_at"]), _expires(x), x.get("queue_position"),
                       until(x.get("estimated_start")) if x.get("estimated_start") else "-",
                       _binding(x), reason_cell(x), ",".join(x.get("gpus") or [])] for x in leases], headers=headers)
    return table(["ID", state, "TEAM", "USER", "POOL", "GPUS", "HOST", "MODEL", "PRIORITY", "AGE", "EXPIRES IN",
                  "REASON"],
                 [[x["id"][:8], x["state"], x["team"], x["user"], x["pool"], x["gpu_count"], x.get("host"),
                   x.get("model"), x["priority_class"], age(x["created_at"]), _expires(x), reason_cell(x)]
                  for x in leases], headers=headers)


def _binding(lease: dict[str, Any]) -> str | None:
    binding = lease.get("binding") or {}
    return f"{binding.get('kind')}: {(binding.get('status') or {}).get('state', '-')}" if binding else None


@click.command("ls")
@click.option("--all", "everything", is_flag=True, help="every lease: ended ones too, and all of them (no --limit)")
@click.option("--state", type=click.Choice(STATES), multiple=True, help="only this state (repeatable)")
@click.option("--pool", help="only this pool")
@click.option("--team", help="only this team")
@click.option("--limit", type=click.IntRange(min=0), default=DEFAULT_LIMIT, show_default=True,
              help="at most this many rows; 0: all")
@no_headers_option
@watch_option
@interval_option
@global_options
def cmd_ls(everything: bool, state: tuple[str, ...], pool: str | None, team: str | None, limit: int,
           watch: bool, interval: float) -> int:
    """Your teams' leases, newest first (active ones unless --all or --state).

    Past --limit the list says how many more there are."""
    ctx = current()
    params: dict[str, Any] = {"pool": pool, "team": team}
    if state:
        params["state"] = list(state)
    elif not everything:
        params["active"] = "true"
    max_rows = None if everything or limit == 0 else limit

    def frame() -> tuple[Any, RenderableType, str]:
        page = ctx.client.page("leases/", max_rows=max_rows, **params)
        note = f"… {page.more:,} more leases (showing {len(page.rows):,} of {page.count:,}): --limit 0 lists them all" \
            if page.more else ""
        if not page.rows:
            return page.rows, Text(""), "No leases found."
        return page.rows, leases_table(page.rows, wide=ctx.wide, headers=not ctx.no_headers), note

    return watched(ctx, frame, watch=watch, interval=interval)


@click.command("show")
@click.argument("lease_id", metavar="ID", shell_complete=complete_leases)
@global_options
def cmd_show(lease_id: str) -> int:
    """One lease with its audit trail. ID: the id, or a unique prefix as `ls` prints it."""
    ctx = current()
    lease_id = resolve_lease(ctx, lease_id)
    lease = ctx.client.get(f"leases/{lease_id}/")
    events = ctx.client.get(f"leases/{lease_id}/events/")
    rows = [[e["at"][:19].replace("T", " "), e["actor"], e["action"], e["message"]] for e in events]
    ctx.emit({**lease, "events": events},
             lambda: Group(lease_block(lease), Text("\naudit trail"),
                           table(["AT (UTC)", "ACTOR", "ACTION", Column("MESSAGE", max_width=90)], rows)))
    return 0


@click.command("renew")
@click.argument("lease_id", metavar="ID", shell_complete=complete_leases)
@click.option("--ttl", help="new TTL: 90s, 30m, 2h, 1d")
@click.option("--keep", is_flag=True, help="also exempt it from idle reclaim for good (pool admins only)")
@global_options
def cmd_renew(lease_id: str, ttl: str | None, keep: bool) -> int:
    """Push a lease's expiry to now + TTL."""
    ctx = current()
    body = {"ttl_seconds": parse_duration(ttl)} if ttl else {}
    lease_id = resolve_lease(ctx, lease_id)
    lease = ctx.client.post(f"leases/{lease_id}/renew/" + ("?keep=true" if keep else ""), body, idempotent=True)
    ctx.emit(lease, lambda: Text(f"lease {lease['id']} renewed: expires {lease.get('expires_at') or '-'}"
                                 f" (in {until(lease.get('expires_at'))})"))
    return 0


def _end(lease_id: str, reason: str | None) -> int:
    ctx = current()
    lease_id = resolve_lease(ctx, lease_id)
    lease = ctx.client.post(f"leases/{lease_id}/release/", {"reason": reason} if reason else {}, idempotent=True)
    ctx.emit(lease, lambda: Text(f"lease {lease['id']} {lease['state']}: {lease.get('reason') or ''}".rstrip(": ")))
    return 0


@click.command("release")
@click.argument("lease_id", metavar="ID", shell_complete=complete_leases)
@click.option("--reason", help="why, for the audit trail")
@global_options
def cmd_release(lease_id: str, reason: str | None) -> int:
    """End a lease (or cancel a pending one)."""
    return _end(lease_id, reason)


@click.command("cancel")
@click.argument("lease_id", metavar="ID", shell_complete=complete_leases)
@click.option("--reason", default="cancelled from the CLI", show_default=True, help="why, for the audit trail")
@global_options
def cmd_cancel(lease_id: str, reason: str) -> int:
    """Cancel a request (a pending lease; a granted one is released)."""
    return _end(lease_id, reason)


COMMANDS = (cmd_ls, cmd_show, cmd_renew, cmd_release, cmd_cancel)
