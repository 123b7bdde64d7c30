"""What a `sources` entry of kind `kubernetes` may say (the keys are documented in
`agents.kubernetes`), its defaults, and everything wrong with one in sentences an operator reads
(the connector's `validate_config`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agents.k8s_dra import BINDING_AUTO, validate_device_binding
from agents.k8s_telemetry import validate_telemetry

DEFAULT_NAMESPACE = "gpupool-jobs"
DEFAULT_PENDING_DEADLINE_S = 300
CONFIG_KEYS = frozenset(
    {
        "kubeconfig",
        "in_cluster",
        "context",
        "namespace",
        "host",
        "request_timeout",
        "pending_deadline_s",
        "telemetry",
        "device_binding",
    }
)


def config_errors(config: Mapping[str, Any]) -> list[str]:
    """Human sentences for everything wrong with an entry; empty when it is usable."""
    errors = []
    in_cluster = config.get("in_cluster", False)
    if not isinstance(in_cluster, bool):
        errors.append("'in_cluster' must be true or false")
    if in_cluster and config.get("kubeconfig"):
        errors.append("give either 'kubeconfig' or 'in_cluster: true', not both")
    if not (in_cluster or config.get("kubeconfig") or config.get("host")):
        errors.append("a kubernetes source needs 'kubeconfig' (a path) or 'in_cluster: true'")
    for key in ("kubeconfig", "context", "host"):
        if key in config and not isinstance(config[key], str):
            errors.append(f"'{key}' must be a string")
    namespace = config.get("namespace", DEFAULT_NAMESPACE)
    if not isinstance(namespace, str) or not is_dns_label(namespace):
        errors.append(f"'namespace' must be a DNS label (like gpupool-jobs), got {namespace!r}")
    errors.extend(validate_device_binding(config.get("device_binding", BINDING_AUTO)))
    for key in ("request_timeout", "pending_deadline_s"):
        value = config.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            errors.append(f"'{key}' must be a positive number of seconds, got {value!r}")
    if "telemetry" in config:
        errors.extend(validate_telemetry(config["telemetry"]))
    return errors


def is_dns_label(text: str) -> bool:
    """A valid namespace name (the config's, or a binding's own)."""
    return len(text) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", text) is not None
