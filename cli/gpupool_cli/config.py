"""Where the CLI finds the server and its token, and the contexts file that `gpupool login` writes.

The file (`$XDG_CONFIG_HOME/gpupool/config.json`, `~/.config/gpupool/config.json` by default, or
`GPUPOOL_CONFIG`) holds named contexts, one per server or identity, and which one is current:

    {"current-context": "prod", "contexts": {"prod": {"url": "...", "token": "..."}, "lab": {...}}}

A file of the first CLI (`{"url": ..., "token": ...}`) reads as one context named "default".
For one command: `--url`/`--token` win, then `--context NAME`, then `GPUPOOL_URL`/`GPUPOOL_TOKEN`,
then `GPUPOOL_CONTEXT`, then the current context."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool_cli.errors import CliError, NotFound, UsageError

DEFAULT_CONTEXT = "default"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,62}")
_HINT = "run `gpupool login --url URL --with-token` (token on stdin) or set GPUPOOL_URL and GPUPOOL_TOKEN"


@dataclass(frozen=True)
class Config:
    url: str
    token: str


@dataclass
class Contexts:
    current: str | None = None
    contexts: dict[str, Config] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"current-context": self.current,
                "contexts": {name: {"url": c.url, "token": c.token} for name, c in sorted(self.contexts.items())}}


def config_path() -> Path:
    """`GPUPOOL_CONFIG` when set (tests), else `$XDG_CONFIG_HOME/gpupool/config.json`."""
    explicit = os.environ.get("GPUPOOL_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpupool" / "config.json"


def read_contexts() -> Contexts:
    """The saved contexts; an absent file has none, an unreadable one is an error."""
    path = config_path()
    if not path.exists():
        return Contexts()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}", code="bad_config") from exc
    if not isinstance(data, dict):
        raise CliError(f"{path} does not hold a JSON object", code="bad_config")
    if "contexts" not in data:  # the first CLI's file: one server
        if data.get("url") and data.get("token"):
            return Contexts(DEFAULT_CONTEXT, {DEFAULT_CONTEXT: Config(str(data["url"]), str(data["token"]))})
        return Contexts()
    found = {str(name): Config(str(c.get("url", "")), str(c.get("token", "")))
             for name, c in (data.get("contexts") or {}).items() if isinstance(c, dict)}
    current = data.get("current-context")
    return Contexts(str(current) if current in found else None, found)


def write_contexts(contexts: Contexts) -> Path:
    """Write the file readable by its owner only (it holds credentials)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(contexts.as_json(), handle, indent=2)
        handle.write("\n")
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT
    return path


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise UsageError(f"not a context name: {name!r} (letters, digits and _.:@- , up to 63)", code="bad_context")
    return name


def save(config: Config, *, name: str = DEFAULT_CONTEXT) -> Path:
    """Add or replace context `name` and make it the current one."""
    contexts = read_contexts()
    contexts.contexts[check_name(name)] = config
    contexts.current = name
    return write_contexts(contexts)


def use(name: str) -> Path:
    contexts = read_contexts()
    if name not in contexts.contexts:
        raise NotFound(f"no context {name!r} (gpupool config get-contexts lists them)", code="unknown_context")
    contexts.current = name
    return write_contexts(contexts)


def delete(name: str) -> Path:
    contexts = read_contexts()
    if contexts.contexts.pop(name, None) is None:
        raise NotFound(f"no context {name!r} (gpupool config get-contexts lists them)", code="unknown_context")
    if contexts.current == name:
        contexts.current = None
    return write_contexts(contexts)


def load(url: str | None = None, token: str | None = None, context: str | None = None) -> Config:
    """The server and token of one command (the order of the module docstring)."""
    saved = read_contexts()
    if context:
        if context not in saved.contexts:
            raise NotFound(f"no context {context!r} (gpupool config get-contexts lists them)",
                           code="unknown_context")
        named = saved.contexts[context]
        url, token = url or named.url, token or named.token
    chosen = saved.contexts.get(os.environ.get("GPUPOOL_CONTEXT") or saved.current or "")
    url = url or os.environ.get("GPUPOOL_URL") or (chosen.url if chosen else None)
    token = token or os.environ.get("GPUPOOL_TOKEN") or (chosen.token if chosen else None)
    if not url:
        raise UsageError(f"no server: {_HINT}")
    if not token:
        raise UsageError(f"no token: {_HINT}")
    return Config(url=url.rstrip("/"), token=token)
