"""`--watch` on the list commands: the list again every `--interval` seconds until Ctrl-C.

On a terminal the list is redrawn in place (Rich Live, cut to the screen's height); on a pipe, or
with -o json|yaml, a frame is printed each time it changes. A command without --watch prints one
frame: the rows on stdout, and its note ("No leases found.", "… N more") on stderr."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Group, RenderableType
from rich.live import Live
from rich.text import Text

from gpupool_cli.context import Ctx

F = TypeVar("F", bound=Callable[..., Any])
# One frame: the API's rows (for -o json|yaml), their rendering, and a note for people ("" none).
Frame = tuple[Any, RenderableType, str]


def watch_option(fn: F) -> F:
    return click.option("-w", "--watch", is_flag=True, help="list again every --interval seconds until Ctrl-C")(fn)


def interval_option(fn: F) -> F:
    return click.option("--interval", type=click.FloatRange(min=0.5), default=2.0, show_default=True,
                        help="seconds between frames of --watch")(fn)


def watched(ctx: Ctx, frame: Callable[[], Frame], *, watch: bool, interval: float) -> int:
    if not watch:
        _print(ctx, frame())
        return 0
    sleep = ctx.sleep or time.sleep
    try:
        if ctx.out.is_terminal and not ctx.machine:
            _live(ctx, frame, interval, sleep)
        else:
            _frames(ctx, frame, interval, sleep)
    except KeyboardInterrupt:  # the normal way out of a watch
        pass
    return 0


def _print(ctx: Ctx, shown: Frame) -> None:
    data, renderable, note = shown
    if ctx.machine:
        ctx.dump(data)
    elif data:
        ctx.show(renderable)
    if note:
        ctx.note(note, style="dim")


def _live(ctx: Ctx, frame: Callable[[], Frame], interval: float, sleep: Callable[[float], None]) -> None:
    command = click.get_current_context().command_path
    with Live(console=ctx.out, auto_refresh=False, vertical_overflow="crop") as live:
        while True:
            _, renderable, note = frame()
            head = Text(f"every {interval:g}s: {command}   {time.strftime('%H:%M:%S')}   (Ctrl-C quits)",
                        style="dim")
            live.update(Group(head, renderable, Text(note, style="dim")), refresh=True)
            sleep(interval)


def _frames(ctx: Ctx, frame: Callable[[], Frame], interval: float, sleep: Callable[[float], None]) -> None:
    last: Any = object()
    while True:
        shown = frame()
        if shown[0] != last:
            last = shown[0]
            if not ctx.machine:
                ctx.print(f"--- {time.strftime('%H:%M:%S')}")
            _print(ctx, shown)
        sleep(interval)
