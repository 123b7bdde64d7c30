"""Read-only views of the fleet: pools, gpus, hosts (each with --watch)."""

from __future__ import annotations

from typing import Any

import click
from rich.console import RenderableType

from gpupool_cli.options import complete_pools, current, global_options, no_headers_option
from gpupool_cli.output import Column, age, table, until
from gpupool_cli.watching import Frame, interval_option, watch_option, watched

GPU_STATES = ("free", "leased", "cordoned", "offline", "unhealthy", "foreign")
HOST_STATES = ("ready", "cordoned", "draining", "offline")


def pools_table(pools: list[dict[str, Any]], *, headers: bool = True) -> RenderableType:
    rows = [[p["name"], p["capacity"], p["allocated"], p["free"], p["pending"], p.get("pending_gpus", 0),
             ", ".join(f"{m} ×{c['total']}" for m, c in sorted(p.get("models", {}).items()))]
            for p in pools]
    return table(["POOL", "CAPACITY", "ALLOCATED", "FREE", "PENDING", "PENDING GPUS", "MODELS"], rows,
                 headers=headers)


def _frame(rows: list[Any], render: RenderableType, what: str) -> Frame:
    return rows, render, "" if rows else f"No {what} found."


@click.command("pools")
@no_headers_option
@watch_option
@interval_option
@global_options
def cmd_pools(watch: bool, interval: float) -> int:
    """Pools with capacity, allocation and queue."""
    ctx = current()

    def frame() -> Frame:
        pools = ctx.client.all("pools/")
        return _frame(pools, pools_table(pools, headers=not ctx.no_headers), "pools")

    return watched(ctx, frame, watch=watch, interval=interval)


@click.command("gpus")
@click.option("--pool", help="pool name", shell_complete=complete_pools)
@click.option("--host", help="host name")
@click.option("--model", help="model substring")
@click.option("--state", type=click.Choice(GPU_STATES))
@no_headers_option
@watch_option
@interval_option
@global_options
def cmd_gpus(pool: str | None, host: str | None, model: str | None, state: str | None, watch: bool,
             interval: float) -> int:
    """GPUs with state and telemetry."""
    ctx = current()

    def frame() -> Frame:
        gpus = ctx.client.all("gpus/", pool=pool, host=host, state=state, model=model)
        rows = [[g["uuid"], g["host"], g["index"], g["model"], g["memory_mb"], g["pool"], g["state"],
                 None if g.get("utilization_pct") is None else f"{g['utilization_pct']:.0f}%",
                 *([g.get("temperature_c"), g.get("power_w"), g.get("memory_used_mb")] if ctx.wide else []),
                 (g.get("lease") or "")[: 36 if ctx.wide else 8]] for g in gpus]
        extra = ["TEMP C", "POWER W", "MEM USED MB"] if ctx.wide else []
        columns: list[Column | str] = ["UUID", "HOST", "IDX", "MODEL", "MEM MB", "POOL", Column("STATE", state=True),
                                       "UTIL", *extra, "LEASE"]
        return _frame(gpus, table(columns, rows, headers=not ctx.no_headers), "GPUs")

    return watched(ctx, frame, watch=watch, interval=interval)


@click.command("hosts")
@click.option("--pool", shell_complete=complete_pools)
@click.option("--source")
@click.option("--state", type=click.Choice(HOST_STATES))
@no_headers_option
@watch_option
@interval_option
@global_options
def cmd_hosts(pool: str | None, source: str | None, state: str | None, watch: bool, interval: float) -> int:
    """Hosts and nodes with their state."""
    ctx = current()

    def frame() -> Frame:
        hosts = ctx.client.all("hosts/", pool=pool, state=state, source=source)
        rows = [[h["id"], h["name"], h["source"], h["kind"], h["state"], h["gpu_count"], h["driver_version"],
                 h["cuda_version"], *([h.get("labels") or None] if ctx.wide else []), age(h.get("last_seen")),
                 h.get("probe_failures") or None, until(h.get("next_probe_at")), h.get("error")] for h in hosts]
        # FAILS: discovery probes failed in a row; NEXT PROBE: when a host backing off is tried again.
        columns: list[Column | str] = ["ID", "HOST", "SOURCE", "KIND", Column("STATE", state=True), "GPUS",
                                       "DRIVER", "CUDA", *(["LABELS"] if ctx.wide else []), "SEEN", "FAILS",
                                       "NEXT PROBE", "ERROR"]
        return _frame(hosts, table(columns, rows, headers=not ctx.no_headers), "hosts")

    return watched(ctx, frame, watch=watch, interval=interval)


COMMANDS = (cmd_pools, cmd_gpus, cmd_hosts)
