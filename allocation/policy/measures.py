"""The replay's summary measures: percentiles and Jain's fairness index."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks; 0.0 for no values."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def jain(values: Sequence[float]) -> float:
    if not values or not any(values):
        return 1.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))
