"""Dashboard fixtures: logged-in clients and (for browser tests) Chromium; the seeded fleets are
tests.support.dashboard_fixtures'."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.frontend.browser import launch


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
