"""The binder's outcomes are typed words: those naming a lease or binding state are that state."""

from __future__ import annotations

from typing import get_args

from agents.base import BIND_ENDED, BIND_RUNNING, BIND_STARTING
from allocation.choices import END_STATES
from allocation.workloads.binding import BindOutcome, ObserveOutcome, UnbindOutcome


def test_observe_outcomes_are_lease_end_states_or_live_binding_states() -> None:
    words = set(get_args(ObserveOutcome)) - {"skipped", "error"}
    assert words - {BIND_STARTING, BIND_RUNNING} <= set(END_STATES)
    assert {BIND_STARTING, BIND_RUNNING}.isdisjoint(BIND_ENDED)
    assert "bound" in get_args(BindOutcome) and "unbound" in get_args(UnbindOutcome)
