"""The pure metering arithmetic: GPU-equivalents of MIG slices and replicas, calendar periods
(UTC; ISO week from Monday, month, quarter) and their resets, prices matched to models."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from allocation.policy.metering import gpu_equivalent, overlap_hours, period_end, period_start, price_for


@pytest.mark.parametrize(("model", "profile", "replicas", "expected"), [
    ("NVIDIA H100 80GB HBM3", "", 1, 1.0),
    ("NVIDIA H100 80GB HBM3", "1g.10gb", 1, 1 / 7),
    ("NVIDIA A100-SXM4-40GB", "3g.20gb", 1, 3 / 7),
    ("NVIDIA A100-SXM4-80GB", "7g.80gb", 1, 1.0),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me", 1, 1 / 7),
    ("NVIDIA A100-SXM4-40GB", "1c.3g.20gb", 1, 3 / 7),  # a compute instance of a 3g slice
    ("NVIDIA A30", "2g.12gb", 1, 2 / 4),
    ("Tesla T4", "", 4, 0.25),
    ("NVIDIA H100 80GB HBM3", "1g.10gb", 2, 1 / 14),
    ("NVIDIA H100 80GB HBM3", "odd-profile", 1, 1.0),  # unreadable: charge a whole GPU, not nothing
])
def test_one_leased_gpu_counts_its_share_of_a_whole_gpu(model, profile, replicas, expected) -> None:
    assert gpu_equivalent(model, profile, replicas) == pytest.approx(expected)


def _at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(("period", "now", "start", "end"), [
    ("week", _at(2026, 11, 26, 15, 30), _at(2026, 11, 23), _at(2026, 11, 30)),      # a Thursday
    ("week", _at(2026, 11, 23, 0, 0), _at(2026, 11, 23), _at(2026, 11, 30)),        # Monday midnight
    ("week", _at(2026, 12, 31, 23, 59), _at(2026, 12, 28), _at(2027, 1, 4)),        # across the year
    ("month", _at(2026, 2, 28, 23, 59), _at(2026, 2, 1), _at(2026, 3, 1)),
    ("month", _at(2026, 12, 15), _at(2026, 12, 1), _at(2027, 1, 1)),
    ("quarter", _at(2026, 5, 20), _at(2026, 4, 1), _at(2026, 7, 1)),
    ("quarter", _at(2026, 11, 24), _at(2026, 10, 1), _at(2027, 1, 1)),
    ("quarter", _at(2026, 1, 1), _at(2026, 1, 1), _at(2026, 4, 1)),
])
def test_periods_are_calendar_periods_in_utc(period, now, start, end) -> None:
    assert period_start(period, now) == start
    assert period_end(period, now) == end


def test_a_period_is_read_in_utc_whatever_the_zone_of_now() -> None:
    from datetime import timedelta, timezone

    tokyo = timezone(timedelta(hours=9))
    # Monday 1 December 2026, 08:00 in Tokyo is still Sunday 30 November in UTC.
    now = datetime(2026, 12, 1, 8, 0, tzinfo=tokyo)
    assert period_start("month", now) == _at(2026, 11, 1)
    with pytest.raises(ValueError, match="unknown period"):
        period_start("year", now)


def test_prices_match_exactly_first_then_the_longest_substring() -> None:
    prices = {"H100": 2.0, "H100 80GB HBM3": 3.0, "a100": 1.0, "NVIDIA A100-SXM4-40GB": 0.5}
    assert price_for("NVIDIA H100 80GB HBM3", prices) == 3.0
    assert price_for("NVIDIA H100 PCIe", prices) == 2.0
    assert price_for("NVIDIA A100-SXM4-80GB", prices) == 1.0  # case-insensitive
    assert price_for("nvidia a100-sxm4-40gb", prices) == 0.5
    assert price_for("Tesla T4", prices) is None


def test_overlap_hours_clip_a_grant_to_the_window() -> None:
    assert overlap_hours(2.0, 0, 7200, 3600, 10_000) == pytest.approx(2.0)
    assert overlap_hours(2.0, 0, 3600, 3600, 10_000) == 0.0
