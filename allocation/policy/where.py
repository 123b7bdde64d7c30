"""Where a lease may run: the workload kinds a host can start, and the lease's selector.

Pure data and matching, no Django. The engine gives each GPU the workload kinds its host's
source can start (ssh: process; kubernetes: pod; simulated: both), its placement *domain* (the
unit a multi-host lease may not leave: one Kubernetes cluster, or all hosts reached by SSH) and
the *tags* of the pending selectors its host matches; a request names the workload kind it needs
and the tag of its selector. Matching then treats them like model or memory (matching.py): a kind
of GPU is eligible or not, so gates, placement, preemption and backfill all honour them, and the
simulator gets them for free.

A selector is `{source: NAME | [NAMES], host: NAME, labels: {key: value}}`, every part
optional, all parts must hold. Its *tag* is its canonical text, so that equal selectors share a
tag and a reason can show it as it is: `source=ka,kb host=node-1 zone=a`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PROCESS = "process"
POD = "pod"
SESSION = "session"  # a shell on the lease's host, nothing started (ssh)
WORKLOADS: frozenset[str] = frozenset({PROCESS, POD, SESSION})
#: The keys a selector may carry.
SELECTOR_KEYS = ("source", "host", "labels")


@dataclass(frozen=True)
class Selector:
    sources: tuple[str, ...] = ()  # any of these sources ("" none: any source)
    host: str = ""  # this host name ("" any)
    labels: tuple[tuple[str, str], ...] = ()  # every one of these host labels, sorted

    @property
    def tag(self) -> str:
        """The canonical text of the selector; "" for an empty selector (matches every host)."""
        parts = []
        if self.sources:
            parts.append("source=" + ",".join(self.sources))
        if self.host:
            parts.append(f"host={self.host}")
        parts.extend(f"{key}={value}" for key, value in self.labels)
        return " ".join(parts)

    def matches(self, source: str, host: str, labels: Mapping[str, str] | None) -> bool:
        """Whether a host (its source's name, its own name and its labels) is selected."""
        if self.sources and source not in self.sources:
            return False
        if self.host and host != self.host:
            return False
        if self.labels:
            have = labels or {}
            return all(have.get(key) == value for key, value in self.labels)
        return True


def selector_of(data: Mapping[str, Any] | None) -> Selector:
    """The Selector of a validated selector mapping (see `selector_problems`); {} or None: none."""
    if not data:
        return Selector()
    source = data.get("source") or ()
    sources = (source,) if isinstance(source, str) else tuple(source)
    labels = data.get("labels") or {}
    return Selector(tuple(sorted(set(sources))), str(data.get("host") or ""),
                    tuple(sorted((str(k), str(v)) for k, v in labels.items())))


def selector_problems(data: Any) -> list[str]:
    """What is wrong with a selector given by a user, in words (empty when it is fine)."""
    if data is None:
        return []
    if not isinstance(data, Mapping):
        return ["must be an object with 'source', 'host' and/or 'labels'"]
    problems = [f"unknown key {key!r} (known: {', '.join(SELECTOR_KEYS)})" for key in data
                if key not in SELECTOR_KEYS]
    source = data.get("source")
    if source is not None and not (_text(source) or (
            isinstance(source, list) and source and all(_text(s) for s in source))):
        problems.append("'source' must be a source name or a non-empty list of names")
    if data.get("host") is not None and not _text(data["host"]):
        problems.append("'host' must be a host name")
    labels = data.get("labels")
    if labels is not None and not (isinstance(labels, Mapping) and all(
            _text(k) and isinstance(v, str) for k, v in labels.items())):
        problems.append("'labels' must map label keys to string values")
    return problems


def tags_of(selectors: Iterable[Selector], source: str, host: str,
            labels: Mapping[str, str] | None) -> frozenset[str]:
    """The tags of the selectors a host matches."""
    return frozenset(s.tag for s in selectors if s.matches(source, host, labels))


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 255
