"""Fixtures of the pages' and the time series' tests (tests/frontend, tests/history, tests/api):
the dashboard's lived-in fleet (tests.support.seed) and the busy fleet with recorded minutes
(tests.support.busy). Registered once for the whole suite (tests/conftest.py, `pytest_plugins`)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def fast_passwords(settings: Any) -> None:
    """Seeding logs users in with real passwords; a cheap hasher keeps that quick."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def seeded(demo_fleet: Any, make_user: Any, fast_passwords: None) -> Any:
    """The dashboard's lived-in fleet: leases granted on three training hosts, one free host, leases
    waiting in both pools; users alice, carol, dave and root (admin)."""
    from tests.support.seed import seed_dashboard

    return seed_dashboard(make_user)


@pytest.fixture
def busy_fleet(demo_fleet: Any, make_user: Any) -> Any:
    """The demo fleet with leases granted (some borrowed) and some left waiting."""
    from tests.support.busy import busy_fleet as make_busy_fleet

    return make_busy_fleet(make_user)


@pytest.fixture
def recorded(busy_fleet: Any) -> Any:
    """The busy fleet with three recorded minutes, the last one now."""
    from tests.support.busy import record_minutes

    record_minutes(3)
    return busy_fleet
