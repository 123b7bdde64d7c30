"""Where the CLI finds the server and its token: `GPUPOOL_URL` / `GPUPOOL_TOKEN` first, then the
file `gpupool login` writes (`~/.config/gpupool/config.json`, or `GPUPOOL_CONFIG`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from gpupool_cli.errors import CliError, UsageError


@dataclass(frozen=True)
class Config:
    url: str
    token: str


def config_path() -> Path:
    """`GPUPOOL_CONFIG` when set (tests), else `$XDG_CONFIG_HOME/gpupool/config.json`."""
    explicit = os.environ.get("GPUPOOL_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpupool" / "config.json"


def read_file() -> dict[str, str]:
    """The saved settings; an absent file is empty, an unreadable one is an error."""
    path = config_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}", code="bad_config") from exc
    if not isinstance(data, dict):
        raise CliError(f"{path} does not hold a JSON object", code="bad_config")
    return {k: str(v) for k, v in data.items() if k in ("url", "token")}


def load(url: str | None = None, token: str | None = None) -> Config:
    """Command-line flags win over the environment, which wins over the file."""
    saved = read_file()
    url = url or os.environ.get("GPUPOOL_URL") or saved.get("url")
    token = token or os.environ.get("GPUPOOL_TOKEN") or saved.get("token")
    if not url:
        raise UsageError("no server: run `gpupool login --url URL --token TOKEN` or set GPUPOOL_URL")
    if not token:
        raise UsageError("no token: run `gpupool login --url URL --token TOKEN` or set GPUPOOL_TOKEN")
    return Config(url=url.rstrip("/"), token=token)


def save(config: Config) -> Path:
    """Write the file readable by its owner only (it holds a credential)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": config.url, "token": config.token}, handle, indent=2)
        handle.write("\n")
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT
    return path
