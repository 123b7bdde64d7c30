"""What every command gets: the API client, the output format, and where to write."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from gpupool_cli.client import Client
from gpupool_cli.output import to_json


@dataclass
class Ctx:
    client: Client
    output: str = "table"
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    sleep: Callable[[float], None] | None = None

    @property
    def json(self) -> bool:
        return self.output == "json"

    @property
    def tty(self) -> bool:
        return bool(getattr(self.out, "isatty", lambda: False)())

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def emit(self, data: Any, human: Callable[[], str]) -> None:
        """JSON for scripts with `-o json`, the human rendering otherwise."""
        self.print(to_json(data) if self.json else human())
