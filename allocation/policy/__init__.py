"""The allocation policy: pure functions from a Snapshot to Decisions (no Django, no I/O)."""

from __future__ import annotations

from collections.abc import Callable

from allocation.policy import fifo
from allocation.policy.types import Decisions, Snapshot

Policy = Callable[[Snapshot], Decisions]


def get_policy(name: str = "fair") -> Policy:
    """Return the policy function called `name` ("fair" is the production policy)."""
    policies: dict[str, Policy] = {"fifo": fifo.schedule}
    try:
        from allocation.policy import fair

        policies["fair"] = fair.schedule
    except ImportError:  # pragma: no cover - until the fair policy lands
        policies["fair"] = fifo.schedule
    try:
        return policies[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(policies))}") from None
