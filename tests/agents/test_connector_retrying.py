"""Connector.retrying: the one place every source retries, within one time budget."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agents.base import AgentError, Connector, Discovery, RetryableError


class Plain(Connector):
    # No `kind`: a test double, never registered.
    retry_delays = (0.01, 0.02, 0.03)

    def discover(self) -> Discovery:
        return Discovery()


def failing(errors: list[Exception], seen: list[float]) -> Callable[[float], str]:
    """An attempt that raises `errors` one by one, then answers; it notes each timeout it got."""

    def attempt(timeout: float) -> str:
        seen.append(timeout)
        if errors:
            raise errors.pop(0)
        return "answer"

    return attempt


def test_transient_failures_are_retried_until_an_attempt_succeeds() -> None:
    seen: list[float] = []
    attempt = failing([RetryableError("HTTP 503"), RetryableError("HTTP 503")], seen)
    assert Plain("p", {}).retrying("cannot list", attempt) == "answer"
    assert seen == [10.0, 10.0, 10.0]  # each attempt gets request_timeout_s


def test_giving_up_names_the_last_problem_and_the_attempts() -> None:
    seen: list[float] = []
    attempt = failing([RetryableError("HTTP 503")] * 10, seen)
    with pytest.raises(AgentError) as err:
        Plain("p", {}).retrying("cannot list nodes", attempt)
    assert err.value.permanent is False
    assert err.value.message == "cannot list nodes: HTTP 503 (gave up after 4 attempts)"
    assert len(seen) == 4


def test_other_errors_end_the_call_at_once() -> None:
    seen: list[float] = []
    attempt = failing([AgentError("forbidden", permanent=True)], seen)
    with pytest.raises(AgentError, match=r"^forbidden$"):
        Plain("p", {}).retrying("", attempt)
    assert len(seen) == 1


def test_the_budget_caps_the_attempts_and_each_attempts_timeout() -> None:
    connector = Plain("p", {"request_timeout": 5})
    connector.retry_budget_s = 1.0
    connector.retry_delays = (0.6, 0.6, 0.6)
    seen: list[float] = []
    started = time.monotonic()
    with pytest.raises(AgentError, match=r"gave up after 2 attempts"):
        connector.retrying("x", failing([RetryableError("slow")] * 10, seen))
    assert time.monotonic() - started < 0.9  # the second pause would overrun the budget: none taken
    assert seen[0] == pytest.approx(1.0, abs=0.05) and seen[1] < 0.45  # what the budget has left
    assert connector.request_timeout_s == 5.0


def test_timeouts_come_from_the_config_entry_else_from_the_kind() -> None:
    assert (Plain("p", {}).connect_timeout_s, Plain("p", {}).request_timeout_s) == (10.0, 10.0)
    configured = Plain("p", {"connect_timeout": 2, "request_timeout": 3.5})
    assert (configured.connect_timeout_s, configured.request_timeout_s) == (2.0, 3.5)
    # Bad values are validate_config's to report; the connector keeps its defaults.
    assert Plain("p", {"connect_timeout": "soon", "request_timeout": -1}).request_timeout_s == 10.0
