"""The request bodies the fast lease path takes, checked without DRF: exactly the shapes that
LeaseCreateSerializer, ReleaseSerializer and RenewSerializer accept unchanged (right types, no
whitespace to trim, within bounds, no unknown field). Anything else returns None and the request
goes to the generic path, whose serializers answer it (a 400 naming the field, or a value they
coerce, such as `"gpus": "2"`): the fast path never words an input error of its own.

Each accepted body comes back as the serializer's `validated_data` would be, defaults included,
so the services get the same arguments either way (tests/api/test_lease_fast_path.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from allocation.models import Lease

_TEXT_MAX = {"pool": 64, "team": 64, "priority_class": 64, "model": 255}
_CREATE_DEFAULTS: dict[str, Any] = {
    "model": "", "min_memory_mb": 0, "min_driver_version": "", "min_cuda_version": "", "team": None,
    "priority_class": None, "ttl_seconds": None, "same_host": True, "requeue_on_loss": False, "binding": None,
    "selector": None}
_VERSION_MAX = {name: int(getattr(Lease._meta.get_field(name), "max_length", 0) or 0)
                for name in ("min_driver_version", "min_cuda_version")}


def _plain_text(value: Any, max_length: int, *, blank: bool) -> bool:
    """A str DRF's CharField keeps as it is: nothing to trim, printable (no NUL, no surrogate)."""
    return (isinstance(value, str) and len(value) <= max_length and (blank or value != "")
            and value == value.strip() and value.isprintable())


def _int(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _version(value: Any, max_length: int) -> bool:
    if not isinstance(value, str) or len(value) > max_length:
        return False
    return value == "" or all(part.isascii() and part.isdigit() for part in value.split("."))


def create_body(data: Any) -> dict[str, Any] | None:
    """LeaseCreateSerializer's validated_data for `data`, or None: let the generic path decide."""
    if not isinstance(data, dict) or not {"pool", "gpus"} <= data.keys() or not data.keys() <= _CREATE_KEYS:
        return None
    for name, value in data.items():
        if not _CHECKS[name](value):
            return None
    return {**_CREATE_DEFAULTS, **data}


def release_body(data: Any) -> dict[str, Any] | None:
    """ReleaseSerializer's validated_data (`reason`), or None."""
    if data is None or data == {}:
        return {"reason": ""}
    if isinstance(data, dict) and data.keys() == {"reason"} and _plain_text(data["reason"], 500, blank=True):
        return {"reason": data["reason"]}
    return None


def renew_body(data: Any) -> dict[str, Any] | None:
    """RenewSerializer's validated_data (`ttl_seconds`), or None."""
    if data is None or data == {}:
        return {"ttl_seconds": None}
    if isinstance(data, dict) and data.keys() == {"ttl_seconds"}:
        ttl = data["ttl_seconds"]
        if ttl is None or _int(ttl, 1, 2**31 - 1):
            return {"ttl_seconds": ttl}
    return None


def _ttl(value: Any) -> bool:
    return value is None or _int(value, 1, settings.GPUPOOL["MAX_TTL_S"])


_CHECKS: dict[str, Any] = {
    "pool": lambda v: _plain_text(v, _TEXT_MAX["pool"], blank=False),
    "gpus": lambda v: _int(v, 1, 4096),
    "model": lambda v: _plain_text(v, _TEXT_MAX["model"], blank=True),
    "min_memory_mb": lambda v: _int(v, 0, 10**9),
    "min_driver_version": lambda v: _version(v, _VERSION_MAX["min_driver_version"]),
    "min_cuda_version": lambda v: _version(v, _VERSION_MAX["min_cuda_version"]),
    "team": lambda v: v is None or _plain_text(v, _TEXT_MAX["team"], blank=False),
    "priority_class": lambda v: v is None or _plain_text(v, _TEXT_MAX["priority_class"], blank=False),
    "ttl_seconds": _ttl,
    "same_host": lambda v: type(v) is bool,
    "requeue_on_loss": lambda v: type(v) is bool,
    "binding": lambda v: v is None,  # a workload: the generic path validates it (BindingSerializer)
    "selector": lambda v: v is None,
}
_CREATE_KEYS = frozenset(_CHECKS)
