"""The allocation policy: pure functions from a Snapshot to Decisions (no Django, no I/O)."""

from __future__ import annotations

from collections.abc import Callable

from allocation.policy import fair, fifo
from allocation.policy.types import Decisions, Snapshot

Policy = Callable[[Snapshot], Decisions]

_POLICIES: dict[str, Policy] = {"fair": fair.schedule, "fifo": fifo.schedule}


def get_policy(name: str = "fair") -> Policy:
    """Return the policy function called `name` ("fair" is the production policy); ValueError
    names the known ones when there is no such policy."""
    try:
        return _POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(_POLICIES))}") from None
