"""`gpupool top`: pools, quotas and the queue, live, fitted to the terminal.

On a terminal it takes the whole screen (Rich Live) and never scrolls: the pool and quota tables
stay at the top and the queue gets the rows that are left, with "… N more" below. Keys: `q` quits,
`s` cycles the sort order, `p` `a` `g` `t` `u` `c` pick one (position, age, GPUs, team, user,
class), `r` reverses it. On a pipe (or with --once) each frame is printed whole."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.live import Live
from rich.text import Text

from gpupool_cli.context import Ctx
from gpupool_cli.fleet import pools_table
from gpupool_cli.options import current, global_options
from gpupool_cli.output import Column, age, format_duration, parse_time, table

QUEUE_ROWS = 500  # pending leases read per frame (a screen shows far fewer)
SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "position": lambda x: (x["pool"], x.get("queue_position") or 10**9, x["created_at"]),
    "age": lambda x: x["created_at"],
    "gpus": lambda x: (-x["gpu_count"], x["created_at"]),
    "team": lambda x: (x["team"], x["created_at"]),
    "user": lambda x: (x["user"], x["created_at"]),
    "class": lambda x: (x["priority_class"], x["created_at"]),
}
KEYS = {"p": "position", "a": "age", "g": "gpus", "t": "team", "u": "user", "c": "class"}


@dataclass
class View:
    sort: str = "position"
    reverse: bool = False

    def key(self, char: str) -> bool:
        """Apply one key press; False for quit."""
        if char in ("q", "Q", "\x03"):
            return False
        if char == "s":
            names = list(SORTS)
            self.sort = names[(names.index(self.sort) + 1) % len(names)]
        elif char == "r":
            self.reverse = not self.reverse
        elif char in KEYS:
            self.sort = KEYS[char]
        return True


def read_frame(ctx: Ctx) -> dict[str, Any]:
    """One frame's data: pools, quotas and the queue (what the caller may see)."""
    return {"pools": ctx.client.all("pools/"), "quotas": ctx.client.all("quotas/"),
            "queue": ctx.client.all("leases/", state="pending", max_rows=QUEUE_ROWS)}


def render(data: dict[str, Any], view: View, *, height: int | None = None) -> RenderableType:
    """The frame; with `height`, the quota and queue tables are cut so that it fits."""
    pools, quotas = data["pools"], data["quotas"]
    queue = sorted(data["queue"], key=SORTS[view.sort], reverse=view.reverse)
    quota_room = queue_room = None
    if height is not None:
        left = max(6, height - (len(pools) + 1) - 7)  # title, pools, blank lines, queue heading, keys
        quota_room = min(len(quotas), max(2, left // 3))
        queue_room = max(3, left - quota_room - 3)
    shown_quotas = quotas[:quota_room] if quota_room is not None else quotas
    shown_queue = queue[:queue_room] if queue_room is not None else queue
    quota_rows = [[q["team"], q["pool"], q["used"], q["guaranteed"], "∞" if q["limit"] is None else q["limit"],
                   q["borrowed"], q["pending"]] for q in shown_quotas]
    queue_rows = [[x.get("queue_position"), x["id"][:8], x["pool"], x["team"], x["user"], x["gpu_count"],
                   x["priority_class"], age(x["created_at"]), _eta(x.get("estimated_start")), x.get("reason")]
                  for x in shown_queue]
    parts: list[RenderableType] = [
        Text(f"gpupool top — {time.strftime('%H:%M:%S')}", style="bold"), Text(""), pools_table(pools), Text(""),
        table(["TEAM", "POOL", "USED", "GUARANTEED", "LIMIT", "BORROWED", "PENDING"], quota_rows),
    ]
    if len(shown_quotas) < len(quotas):
        parts.append(Text(f"… {len(quotas) - len(shown_quotas)} more quotas", style="dim"))
    order = f"sorted by {view.sort}{' (reversed)' if view.reverse else ''}"
    parts += [Text(""), Text(f"queue ({len(queue)} pending) {order}", style="bold")]
    parts.append(table(["#", "LEASE", "POOL", "TEAM", "USER", "GPUS", "PRIORITY", "WAITING", "ETA",
                        Column("REASON", max_width=100)], queue_rows) if queue_rows else Text("(empty)"))
    if len(shown_queue) < len(queue):
        parts.append(Text(f"… {len(queue) - len(shown_queue)} more", style="dim"))
    return Group(*parts)


def _eta(value: str | None) -> str:
    moment = parse_time(value)
    if moment is None:
        return "-"
    return "in " + format_duration(max(0.0, moment.timestamp() - time.time()))


@contextlib.contextmanager
def keyboard() -> Iterator[Callable[[float], str]]:
    """`read(timeout)` → the keys pressed within `timeout` seconds ("" none), stdin in cbreak
    mode (keys without Enter, no echo) until the block ends. Without a terminal: just a sleep."""
    if not sys.stdin.isatty():
        yield _no_keys
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield lambda timeout: os.read(fd, 32).decode(errors="ignore") if select.select([fd], [], [], timeout)[0] else ""
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _no_keys(timeout: float) -> str:
    time.sleep(timeout)
    return ""


def _live(ctx: Ctx, view: View, interval: float) -> None:
    help_line = Text("q quit · s sort · p a g t u c: position age gpus team user class · r reverse", style="dim")
    with Live(console=ctx.out, screen=True, auto_refresh=False, vertical_overflow="crop") as live, \
            keyboard() as read:
        while True:
            data = read_frame(ctx)
            height = ctx.out.size.height
            live.update(Group(render(data, view, height=height - 1), help_line), refresh=True)
            deadline = time.monotonic() + interval
            while (left := deadline - time.monotonic()) > 0:
                keys = read(left)
                if not all(view.key(k) for k in keys):
                    return
                if keys:  # redraw at once in the new order, without asking the server again
                    live.update(Group(render(data, view, height=height - 1), help_line), refresh=True)


@click.command("top")
@click.option("--once", is_flag=True, help="print one frame and exit")
@click.option("--interval", type=click.FloatRange(min=0.5), default=2.0, show_default=True,
              help="seconds between frames")
@click.option("--sort", type=click.Choice(list(SORTS)), default="position", show_default=True,
              help="order of the queue")
@global_options
def cmd_top(once: bool, interval: float, sort: str) -> int:
    """Live view of pools, quotas and the queue (q quits, s sorts)."""
    ctx = current()
    view = View(sort=sort)
    sleep = ctx.sleep or time.sleep
    try:
        if not once and ctx.out.is_terminal and not ctx.machine:
            _live(ctx, view, interval)
            return 0
        while True:
            data = read_frame(ctx)
            ctx.emit(data, lambda: render(data, view))  # noqa: B023 (called at once)
            if once:
                return 0
            ctx.print("")
            sleep(interval)
    except KeyboardInterrupt:  # the normal way out
        return 0


COMMANDS = (cmd_top,)
