"""Durations on the command line: 90s, 30m, 2h, 1d, combinations and plain seconds."""

from __future__ import annotations

import pytest

from gpupool_cli.errors import UsageError
from gpupool_cli.output import format_duration, parse_duration


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400),
                                           ("1h30m", 5400), ("600", 600), ("1.5h", 5400), (" 2H ", 7200)])
def test_durations_parse_to_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "2x", "h", "-5m", "0s", "1h 30m"])
def test_malformed_durations_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(text)


def test_durations_format_compactly() -> None:
    assert [format_duration(s) for s in (5, 125, 3900, 90000, None)] == ["5s", "2m", "1h05m", "1d01h", "-"]
