"""What a `sources` entry of kind `ssh` may say (the keys are documented in `agents.ssh`), and
everything wrong with one, in sentences an operator reads: the connector's `validate_config`
and its discovery (a bad host entry comes back offline with these words) both ask here."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from agents import time_slicing
from agents.host_backoff import backoff_config_errors
from agents.ssh_access import SHELL_DEFAULTS, shell_config_errors
from agents.ssh_session import HostSpec, PinnedKey

DEFAULTS = {"nvidia_smi": "nvidia-smi", "max_parallel": 16, "state_dir": "~/.gpupool"}
CONFIG_KEYS = frozenset({"user", "key_file", "private_key", "hosts", "connect_timeout", "command_timeout", "backoff",
                         *DEFAULTS, *SHELL_DEFAULTS})
_HOST_KEYS = frozenset({"address", "port", "host_key", "name", "time_slicing", "labels"})


def config_errors(config: Mapping[str, Any], keys: frozenset[str]) -> list[str]:
    """Human sentences for everything wrong with an entry (`keys`: the keys it may have);
    empty when it is usable."""
    errors = source_errors(config, keys)
    hosts = config.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        return [*errors, "hosts must be a non-empty list"]
    names: set[str] = set()
    for position, entry in enumerate(hosts):
        errors += [f"hosts[{position}]: {e}" for e in host_errors(entry)]
        name = host_name(entry, position)
        if name in names:
            errors.append(f"hosts[{position}]: duplicate host name {name!r}; name each host")
        names.add(name)
    return errors


def source_errors(config: Mapping[str, Any], keys: frozenset[str]) -> list[str]:
    """What is wrong with the entry as a whole (every host is stopped by it)."""
    errors = [f"unknown key {key!r}" for key in sorted(set(config) - keys)]
    if not isinstance(config.get("user"), str) or not config.get("user"):
        errors.append("user is required")
    if bool(config.get("key_file")) == bool(config.get("private_key")):
        errors.append("give exactly one of key_file or private_key")
    try:
        if not shlex.split(str(config.get("nvidia_smi", DEFAULTS["nvidia_smi"]))):
            errors.append("nvidia_smi must name a command")
    except ValueError as exc:
        errors.append(f"nvidia_smi is not a valid command line: {exc}")
    for key in ("connect_timeout", "command_timeout", "max_parallel"):
        value = config.get(key)
        if key in config and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            errors.append(f"{key} must be a positive number")
    errors += shell_config_errors(config)
    return errors + (backoff_config_errors(config["backoff"]) if "backoff" in config else [])


def host_errors(entry: Any) -> list[str]:
    """What is wrong with one `hosts` entry (only that host is left out)."""
    if not isinstance(entry, Mapping) or not entry.get("address"):
        return ["address is required"]
    errors = [f"unknown key {key!r}" for key in sorted(set(entry) - _HOST_KEYS)]
    port = entry.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        errors.append("port must be 1-65535")
    try:
        PinnedKey.parse(str(entry.get("host_key") or ""))
    except ValueError as exc:
        errors.append(f"{exc} (hosts without a pinned key are refused)")
    labels = entry.get("labels", {})
    if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in labels.items()):
        errors.append("labels must map label keys to string values (quote numbers)")
    replicas = time_slicing.replicas_error(entry.get("time_slicing", 1))
    return [*errors, replicas] if replicas else errors


def host_spec(entry: Mapping[str, Any], position: int) -> HostSpec:
    """The host of an entry without `host_errors` (the name defaults to the address)."""
    return HostSpec(name=host_name(entry, position), address=str(entry["address"]),
                    port=int(entry.get("port", 22)), host_key=str(entry.get("host_key") or ""))


def host_name(entry: Any, position: int) -> str:
    if isinstance(entry, Mapping) and (entry.get("name") or entry.get("address")):
        return str(entry.get("name") or entry["address"])
    return f"hosts[{position}]"
