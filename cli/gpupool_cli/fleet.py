"""Read-only views of the fleet: pools, gpus, hosts, and the live `top`."""

from __future__ import annotations

import argparse
import time
from typing import Any

from gpupool_cli.context import Ctx
from gpupool_cli.output import age, format_duration, parse_time, table, to_json


def pools_table(pools: list[dict[str, Any]]) -> str:
    rows = [[p["name"], p["capacity"], p["allocated"], p["free"], p["pending"], p.get("pending_gpus", 0),
             ", ".join(f"{m} ×{c['total']}" for m, c in sorted(p.get("models", {}).items()))]
            for p in pools]
    return table(["POOL", "CAPACITY", "ALLOCATED", "FREE", "PENDING", "PENDING GPUS", "MODELS"], rows)


def cmd_pools(ctx: Ctx, args: argparse.Namespace) -> int:
    pools = ctx.client.all("pools/")
    ctx.emit(pools, lambda: pools_table(pools))
    return 0


def cmd_gpus(ctx: Ctx, args: argparse.Namespace) -> int:
    gpus = ctx.client.all("gpus/", pool=args.pool, host=args.host, state=args.state, model=args.model)
    rows = [[g["uuid"], g["host"], g["index"], g["model"], g["memory_mb"], g["pool"], g["state"],
             None if g.get("utilization_pct") is None else f"{g['utilization_pct']:.0f}%",
             (g.get("lease") or "")[:8]] for g in gpus]
    ctx.emit(gpus, lambda: table(["UUID", "HOST", "IDX", "MODEL", "MEM MB", "POOL", "STATE", "UTIL", "LEASE"],
                                 rows))
    return 0


def cmd_hosts(ctx: Ctx, args: argparse.Namespace) -> int:
    hosts = ctx.client.all("hosts/", pool=args.pool, state=args.state, source=args.source)
    rows = [[h["id"], h["name"], h["source"], h["kind"], h["state"], h["gpu_count"], h["driver_version"],
             h["cuda_version"], age(h.get("last_seen")), h.get("error")] for h in hosts]
    ctx.emit(hosts, lambda: table(["ID", "HOST", "SOURCE", "KIND", "STATE", "GPUS", "DRIVER", "CUDA",
                                   "SEEN", "ERROR"], rows))
    return 0


def top_frame(ctx: Ctx) -> tuple[dict[str, Any], str]:
    """One frame of `top`: pools, quotas and the queue (what the caller may see)."""
    pools = ctx.client.all("pools/")
    quotas = ctx.client.all("quotas/")
    queue = ctx.client.all("leases/", state="pending", max_rows=200)
    queue.sort(key=lambda lease: (lease["pool"], lease.get("queue_position") or 10**9, lease["created_at"]))
    data = {"pools": pools, "quotas": quotas, "queue": queue}
    quota_rows = [[q["team"], q["pool"], q["used"], q["guaranteed"],
                   "∞" if q["limit"] is None else q["limit"], q["borrowed"], q["pending"]] for q in quotas]
    queue_rows = [[lease.get("queue_position"), lease["id"][:8], lease["pool"], lease["team"], lease["user"],
                   lease["gpu_count"], lease["priority_class"], age(lease["created_at"]),
                   _eta(lease.get("estimated_start")), lease.get("reason")] for lease in queue]
    text = "\n".join([
        f"gpupool top — {time.strftime('%H:%M:%S')}", "",
        pools_table(pools), "",
        table(["TEAM", "POOL", "USED", "GUARANTEED", "LIMIT", "BORROWED", "PENDING"], quota_rows), "",
        f"queue ({len(queue)} pending)",
        table(["#", "LEASE", "POOL", "TEAM", "USER", "GPUS", "PRIORITY", "WAITING", "ETA", "REASON"], queue_rows)
        if queue_rows else "(empty)",
    ])
    return data, text


def _eta(value: str | None) -> str:
    moment = parse_time(value)
    if moment is None:
        return "-"
    return "in " + format_duration(max(0.0, moment.timestamp() - time.time()))


def cmd_top(ctx: Ctx, args: argparse.Namespace) -> int:
    """Refresh every `--interval` seconds until Ctrl-C (the normal way out: exit 0)."""
    sleep = ctx.sleep or time.sleep
    try:
        while True:
            data, text = top_frame(ctx)
            if args.once:
                ctx.print(to_json(data) if ctx.json else text)
                return 0
            if ctx.json:
                ctx.print(to_json(data))
            else:
                # Home + clear on a terminal; a pipe gets frames one after another.
                ctx.out.write("\x1b[H\x1b[2J" if ctx.tty else "\n")
                ctx.print(text)
            sleep(args.interval)
    except KeyboardInterrupt:
        return 0
