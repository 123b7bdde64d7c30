"""Dashboard fixtures: a seeded fleet, logged-in clients, and (for browser tests) Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.frontend.browser import launch
from tests.frontend.seed import Seeded, seed_dashboard


@pytest.fixture
def fast_passwords(settings: Any) -> None:
    """Seeding logs users in with real passwords; a cheap hasher keeps that quick."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def seeded(demo_fleet: Any, make_user: Any, fast_passwords: None) -> Seeded:
    return seed_dashboard(make_user)


@pytest.fixture
def client_for(client: Any) -> Any:
    """`client_for(user)` → the test client logged in as that user (None: anonymous)."""
    from django.test import Client

    def login(user: Any = None) -> Client:
        c = Client()
        if user is not None:
            c.force_login(user)
        return c

    return login


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Playwright's sync API keeps an event loop in this thread; Django would then refuse ORM calls
    # made by the test itself between browser steps.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield from launch()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    browser.clear_cookies()
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    page.close()
    assert not errors, f"JavaScript errors: {errors}"


@pytest.fixture
def recorded(demo_fleet: Any, make_user: Any) -> Any:
    """The busy demo fleet of the history tests with three minutes of history recorded."""
    from tests.history.busy import busy_fleet, record_minutes

    busy = busy_fleet(make_user)
    record_minutes(3)
    return busy
