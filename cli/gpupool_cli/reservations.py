"""`gpupool reservations [list|create|cancel]`: advance reservations (the API's reservations/)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from gpupool_cli.context import Ctx
from gpupool_cli.errors import UsageError
from gpupool_cli.output import parse_duration, table


def add_parser(add: Any) -> None:
    """Register the command with `add(name, help) -> ArgumentParser` (main.build_parser)."""
    parser = add("reservations", "advance reservations: list (default), create, cancel")
    parser.add_argument("action", nargs="?", choices=["list", "create", "cancel"], default="list")
    parser.add_argument("id", nargs="?", help="cancel: the reservation id")
    parser.add_argument("--pool", help="pool name (create: required)")
    parser.add_argument("--team", help="team name (create: required)")
    parser.add_argument("--gpus", type=int, help="create: how many GPUs")
    parser.add_argument("--model", default="", help="create: model substring, A100|H100 for several")
    parser.add_argument("--start", help="create: ISO 8601 time (default: now)")
    parser.add_argument("--end", help="create: ISO 8601 time")
    parser.add_argument("--for", dest="length", metavar="DURATION", help="create: instead of --end: 2h, 1d")
    parser.add_argument("--state", choices=["active", "cancelled", "ended"], help="list: this state only")


def _time(value: str, flag: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(f"{flag}: not an ISO 8601 time: {value!r}", code="bad_time") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _create_body(args: argparse.Namespace) -> dict[str, Any]:
    missing = [flag for flag, value in (("--pool", args.pool), ("--team", args.team), ("--gpus", args.gpus))
               if value in (None, "")]
    if missing or not (args.end or args.length):
        raise UsageError(f"create needs {', '.join(missing or ['--end or --for'])}", code="missing_option")
    start = _time(args.start, "--start") if args.start else datetime.now(UTC)
    end = _time(args.end, "--end") if args.end else start + _seconds(args.length)
    return {"pool": args.pool, "team": args.team, "gpus": args.gpus, "model": args.model,
            "start": start.isoformat(), "end": end.isoformat()}


def _seconds(text: str) -> timedelta:
    return timedelta(seconds=parse_duration(text))


def _line(r: dict[str, Any]) -> str:
    return (f"reservation {r['id']} {r['state']}: {r['gpus']} GPUs{' of ' + r['model'] if r['model'] else ''} "
            f"in {r['pool']} for team {r['team']}, {r['start']} to {r['end']}")


def cmd_reservations(ctx: Ctx, args: argparse.Namespace) -> int:
    if args.action == "create":
        made = ctx.client.post("reservations/", _create_body(args))
        ctx.emit(made, lambda: _line(made))
        return 0
    if args.action == "cancel":
        if not args.id:
            raise UsageError("cancel needs the reservation id", code="missing_option")
        done = ctx.client.post(f"reservations/{args.id}/cancel/", {})
        ctx.emit(done, lambda: _line(done))
        return 0
    params = {k: v for k, v in (("pool", args.pool), ("team", args.team), ("state", args.state)) if v}
    rows = list(ctx.client.iterate("reservations/", max_rows=500, **params))
    ctx.emit(rows, lambda: table(["ID", "STATE", "POOL", "TEAM", "GPUS", "MODEL", "START", "END", "BY"],
                                 [[r["id"], r["state"], r["pool"], r["team"], r["gpus"], r["model"] or "any",
                                   r["start"][:16], r["end"][:16], r["created_by"]] for r in rows]))
    return 0
