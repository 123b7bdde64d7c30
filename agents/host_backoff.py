"""Per-host backoff of discovery: a host that fails to answer is probed less often.

A dead SSH host costs its source a connect timeout on every discovery round and slows the round
for every other host of the source. After `n` failures in a row it is next probed
`initial_s · 2^(n-1)` seconds later, at most `max_s`, less up to `JITTER` of that at random, so
hosts that died together (a rack's switch) do not all come due in the same round again. One
answer resets it. The delay is counted from the failed probe, and discovery rounds come every
`interval_s` of the source: a delay shorter than the interval skips no round.

A source entry sets it with `backoff: {initial_s: 30, max_s: 900}` (both optional); a kind that
reads its whole fleet in one call has no per-host probe to leave out (`Connector.host_backoff`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Fraction of a delay taken off at random. Below one half, so the delay after n + 1 failures is
#: always longer than the one after n (below the cap).
JITTER = 0.2
_KEYS = ("initial_s", "max_s")


@dataclass(frozen=True)
class HostBackoff:
    """How long a host that keeps failing waits between probes: 30 s, 60 s, … up to 15 min."""

    initial_s: float = 30.0
    max_s: float = 900.0

    def delay_s(self, failures: int, rand: float) -> float:
        """Seconds from the `failures`-th failure in a row (≥ 1) to the next probe; `rand` in
        [0, 1) picks the jitter (0: the full delay). 0 for no failure."""
        if failures < 1:
            return 0.0
        # The exponent is bounded first: 2 ** 10_000 is a float overflow.
        full = min(self.max_s, self.initial_s * 2.0 ** min(failures - 1, 64))
        return full * (1.0 - JITTER * rand)

    @classmethod
    def from_config(cls, value: Any) -> HostBackoff:
        """The backoff of a source entry's `backoff:` mapping (absent: the defaults); a value that
        `backoff_config_errors` refuses falls back to its default."""
        if not isinstance(value, Mapping):
            return cls()
        given = {k: float(value[k]) for k in _KEYS if k in value and not _bad_seconds(value[k])}
        initial = given.get("initial_s", cls.initial_s)
        return cls(initial_s=initial, max_s=max(given.get("max_s", cls.max_s), initial))


def backoff_config_errors(value: Any) -> list[str]:
    """Human sentences for what is wrong with a `backoff:` mapping; empty when it is usable."""
    if not isinstance(value, Mapping):
        return ["backoff must be a mapping of initial_s and max_s (seconds)"]
    errors = [f"backoff: unknown key {key!r}" for key in sorted(set(value) - set(_KEYS), key=str)]
    errors += [f"backoff: {key} must be a positive number of seconds (under 10,000,000)" for key in _KEYS
               if key in value and _bad_seconds(value[key])]
    if not errors and float(value.get("max_s", HostBackoff.max_s)) < float(
            value.get("initial_s", HostBackoff.initial_s)):
        errors.append("backoff: max_s must be at least initial_s")
    return errors


def _bad_seconds(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 10**7
