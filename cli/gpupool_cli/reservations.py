"""`gpupool reservations [list|create|cancel]`: advance reservations (the API's reservations/)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.text import Text

from gpupool_cli.errors import UsageError
from gpupool_cli.options import complete_pools, current, global_options, no_headers_option
from gpupool_cli.output import Column, parse_duration, table


def _time(value: str, flag: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(f"{flag}: not an ISO 8601 time: {value!r}", code="bad_time") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _create_body(args: dict[str, Any]) -> dict[str, Any]:
    missing = [flag for flag, value in (("--pool", args["pool"]), ("--team", args["team"]), ("--gpus", args["gpus"]))
               if value in (None, "")]
    if missing or not (args["end"] or args["length"]):
        raise UsageError(f"create needs {', '.join(missing or ['--end or --for'])}", code="missing_option")
    start = _time(args["start"], "--start") if args["start"] else datetime.now(UTC)
    end = _time(args["end"], "--end") if args["end"] else start + _seconds(args["length"])
    return {"pool": args["pool"], "team": args["team"], "gpus": args["gpus"], "model": args["model"],
            "start": start.isoformat(), "end": end.isoformat()}


def _seconds(text: str) -> timedelta:
    return timedelta(seconds=parse_duration(text))


def _line(r: dict[str, Any]) -> str:
    return (f"reservation {r['id']} {r['state']}: {r['gpus']} GPUs{' of ' + r['model'] if r['model'] else ''} "
            f"in {r['pool']} for team {r['team']}, {r['start']} to {r['end']}")


@click.command("reservations")
@click.argument("action", type=click.Choice(["list", "create", "cancel"]), default="list")
@click.argument("reservation_id", metavar="[ID]", required=False)
@click.option("--pool", help="pool name (create: required)", shell_complete=complete_pools)
@click.option("--team", help="team name (create: required)")
@click.option("--gpus", type=click.IntRange(min=1), help="create: how many GPUs")
@click.option("--model", default="", help="create: model substring, A100|H100 for several")
@click.option("--start", help="create: ISO 8601 time (default: now)")
@click.option("--end", help="create: ISO 8601 time")
@click.option("--for", "length", metavar="DURATION", help="create: instead of --end: 2h, 1d")
@click.option("--state", type=click.Choice(["active", "cancelled", "ended"]), help="list: this state only")
@no_headers_option
@global_options
def cmd_reservations(action: str, reservation_id: str | None, **args: Any) -> int:
    """Advance reservations: list (default), create, cancel ID."""
    ctx = current()
    if action == "create":
        made = ctx.client.post("reservations/", _create_body(args))  # not idempotent: tried once
        ctx.emit(made, lambda: Text(_line(made)))
        return 0
    if action == "cancel":
        if not reservation_id:
            raise UsageError("cancel needs the reservation id", code="missing_option")
        done = ctx.client.post(f"reservations/{reservation_id}/cancel/", {}, idempotent=True)
        ctx.emit(done, lambda: Text(_line(done)))
        return 0
    params = {k: args[k] for k in ("pool", "team", "state") if args[k]}
    page = ctx.client.page("reservations/", max_rows=500, **params)
    rows = page.rows
    if not rows and not ctx.machine:
        ctx.note("No reservations found.")
        return 0
    ctx.emit(rows, lambda: table(["ID", Column("STATE", state=True), "POOL", "TEAM", "GPUS", "MODEL", "START", "END",
                                  "BY"],
                                 [[r["id"], r["state"], r["pool"], r["team"], r["gpus"], r["model"] or "any",
                                   r["start"][:16], r["end"][:16], r["created_by"]] for r in rows],
                                 headers=not ctx.no_headers))
    if page.more:
        ctx.note(f"… {page.more} more reservations", style="dim")
    return 0


COMMANDS = (cmd_reservations,)
