"""History fixtures: a busy demo fleet (tests.history.busy), with a few minutes recorded."""

from __future__ import annotations

from typing import Any

import pytest

from tests.history.busy import Busy, record_minutes
from tests.history.busy import busy_fleet as make_busy_fleet


@pytest.fixture
def busy_fleet(demo_fleet: Any, make_user: Any) -> Busy:
    return make_busy_fleet(make_user)


@pytest.fixture
def recorded(busy_fleet: Busy) -> Busy:
    """Three recorded minutes, the last one now."""
    record_minutes(3)
    return busy_fleet
