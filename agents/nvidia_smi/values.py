"""What the nvidia-smi parsers share: value cleaning, GPU health, the error type."""

from __future__ import annotations

import re
from typing import NamedTuple

from agents.base import HEALTH_OK, HEALTH_UNHEALTHY

_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*[A-Za-z%/]*$")
# Wording seen in the field: "GPU is lost. Reboot the system...", "[GPU requires reset]".
_LOST_WORDS = ("gpu is lost", "gpu requires reset", "fallen off the bus")


class NvidiaSmiError(Exception):
    """A host's nvidia-smi output is unusable as a whole (command missing, driver not loaded)."""


class LostGpu(NamedTuple):
    """A GPU nvidia-smi named by PCI bus id but could not read (fell off the bus, needs reset)."""

    bus_id: str
    message: str


class Health(NamedTuple):
    """`GpuFact.health` and `GpuFact.health_reason` of one GPU."""

    state: str = HEALTH_OK
    reason: str = ""


def health(ecc_errors: int | None, lost: bool) -> Health:
    """Unhealthy, with the reasons in words, when the GPU is lost or has uncorrected ECC errors."""
    reasons = []
    if lost:
        reasons.append("GPU is lost or requires a reset (fell off the bus)")
    if ecc_errors:
        reasons.append(f"{ecc_errors} uncorrected ECC error(s) since the driver loaded")
    return Health(HEALTH_UNHEALTHY, "; ".join(reasons)) if reasons else Health()


def clean(value: str | None) -> str | None:
    """Strip a raw value; None for anything nvidia-smi uses to mean "no value"."""
    if value is None:
        return None
    value = value.strip()
    if not value or value.upper() == "N/A" or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def to_float(value: str | None) -> float | None:
    """`433.78 W` -> 433.78, `38 %` -> 38.0; None for missing or non-numeric values."""
    value = clean(value)
    match = _NUMBER.match(value) if value else None
    return float(match.group(1)) if match else None


def to_int(value: str | None) -> int | None:
    """`81559 MiB` -> 81559; fractions are truncated; None for missing or non-numeric values."""
    number = to_float(value)
    return int(number) if number is not None else None


def is_lost_marker(value: str | None) -> bool:
    """True for values saying the GPU fell off the bus or needs a reset (`[GPU is lost]`)."""
    return value is not None and any(word in value.lower() for word in _LOST_WORDS)


def normalize_bus_id(bus_id: str) -> str:
    """`00000000:04:00.0`, `0000:04:00.0` and `GPU0000:04:00.0` compare equal: `04:00.0`."""
    parts = bus_id.strip().lower().removeprefix("gpu").split(":")
    return ":".join(parts[-2:])
