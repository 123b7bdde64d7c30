"""What every command gets: the API client, the output format, and two Rich consoles (stdout for
results, stderr for progress and notes).

Colour only on a terminal, and never with `NO_COLOR` set (then no escape sequence at all, bold
neither; `TERM=dumb` too). On a
pipe the output is plain text without trailing spaces, at any width (no wrapping or cutting at 80
columns: scripts read whole rows)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console, RenderableType

from gpupool_cli.client import Client
from gpupool_cli.output import to_json, to_yaml

PIPE_WIDTH = 100_000
FORMATS = ("table", "wide", "json", "yaml")


def make_console(file: TextIO) -> Console:
    terminal = bool(getattr(file, "isatty", lambda: False)())
    # NO_COLOR (no-color.org): no escape sequences at all; Rich alone would still send bold.
    plain = bool(os.environ.get("NO_COLOR"))
    return Console(file=file, markup=False, emoji=False, highlight=False, color_system=None if plain else "auto",
                   width=None if terminal else PIPE_WIDTH, soft_wrap=not terminal)


@dataclass
class Ctx:
    client_factory: Callable[[], Client] | None = None
    output: str = "table"
    no_headers: bool = False
    out: Console = field(default_factory=lambda: make_console(sys.stdout))
    err: Console = field(default_factory=lambda: make_console(sys.stderr))
    sleep: Callable[[float], None] | None = None
    _client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            assert self.client_factory is not None, "this command talks to no server"
            self._client = self.client_factory()
        return self._client

    @property
    def json(self) -> bool:
        return self.output == "json"

    @property
    def machine(self) -> bool:
        """JSON or YAML: for scripts, so no progress on stdout and no decoration."""
        return self.output in ("json", "yaml")

    @property
    def wide(self) -> bool:
        return self.output == "wide"

    @property
    def tty(self) -> bool:
        return self.out.is_terminal

    def show(self, renderable: RenderableType, *, console: Console | None = None) -> None:
        """Print on a terminal as Rich does; on a pipe as plain lines without trailing spaces."""
        target = console or self.out
        if target.is_terminal:
            target.print(renderable)
            return
        with target.capture() as captured:
            target.print(renderable)
        text = "\n".join(line.rstrip() for line in captured.get().splitlines())
        target.file.write(text + "\n")
        target.file.flush()

    def print(self, text: str = "") -> None:
        self.out.file.write(text + "\n")
        self.out.file.flush()

    def note(self, text: str, *, style: str = "") -> None:
        """A line for people on stderr (stdout stays for results)."""
        if self.err.is_terminal and style:
            self.err.print(text, style=style)
        else:
            self.err.file.write(text + "\n")
            self.err.file.flush()

    def dump(self, data: Any) -> None:
        self.print(to_yaml(data) if self.output == "yaml" else to_json(data))

    def emit(self, data: Any, human: Callable[[], RenderableType]) -> None:
        """JSON or YAML of the API's objects for scripts (`-o json|yaml`), the human rendering
        otherwise."""
        if self.machine:
            self.dump(data)
        else:
            self.show(human())
