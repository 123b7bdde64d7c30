"""Typed readers for settings from the environment, failing loudly on bad values.

`NAME_FILE` is honoured for every variable (Docker/Kubernetes secrets mounted as files).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import overload


class ImproperlyConfiguredEnv(RuntimeError):
    pass


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    """The contents of the file `NAME_FILE` names (stripped) when set, else the variable's value;
    `default` when neither is set or the variable is empty."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        return Path(file_path).read_text().strip()
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def env_bool(name: str, default: bool) -> bool:
    raw = env_str(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfiguredEnv(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = env_str(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfiguredEnv(f"{name} must be an integer, got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]
