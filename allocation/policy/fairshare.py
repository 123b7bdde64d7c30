"""Fair share: the decayed usage ledger and the order of teams competing for free capacity.

The ledger (Slurm's PriorityDecayHalfLife): usage is GPU-seconds, decaying exponentially with a
half-life, integrated exactly between updates, so the result does not depend on how often the
engine or the simulator updates it.

The share of a team in a pool, used to order teams within one pass:

    share = (decayed_usage / mean_life + allocated) / weight

`mean_life` = half_life / ln 2 turns the ledger into GPUs: a team that has held `a` GPUs for a
long time has a ledger of `a * mean_life`, so its past weighs as much as its present. `allocated`
counts the GPUs it holds in the pool now plus those granted earlier in the same pass (water-
filling), so two backlogged teams with weights 3:1 and no history take 16 free GPUs 12:4, and a
team that used much yesterday yields to one that did not until their shares meet. Ties (equal
share) fall to the older request, then the lease id.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

LN2 = math.log(2.0)
# Usage this small is none at all: `decay` flushes it to 0, and so does the ledger's SQL twin
# (`allocation.ledger.ledger_close_sql`), where a float8 product too small to represent raises
# "value out of range: underflow" instead of giving 0.
NEGLIGIBLE = 1e-100
K = TypeVar("K", bound=Hashable)  # a team: its name in the policy, its id in allocation.ledger


def decay(value: float, elapsed_s: float, half_life_s: float) -> float:
    """`value` after `elapsed_s` seconds of exponential decay. A half-life <= 0 forgets at once;
    an infinite one never forgets; negative elapsed time (clock skew) decays nothing; a value
    below NEGLIGIBLE decays to 0."""
    if abs(value) < NEGLIGIBLE:
        return 0.0
    if elapsed_s <= 0 or math.isinf(half_life_s):
        return value
    if half_life_s <= 0:
        return 0.0
    return value * math.pow(0.5, elapsed_s / half_life_s)


def ledger_update(usage: float, last_update: float, now: float, gpus_held: float,
                  half_life_s: float) -> float:
    """The ledger at `now`, from its value at `last_update` while the team held `gpus_held` GPUs
    the whole time: old usage decays, new usage (gpus x seconds) is added with its own decay."""
    elapsed = now - last_update
    if elapsed <= 0:
        return usage
    return decay(usage, elapsed, half_life_s) + gpus_held * _integral(elapsed, half_life_s)


def _integral(elapsed: float, half_life_s: float) -> float:
    """∫ 0.5^((elapsed - t) / h) dt over [0, elapsed]: one GPU's decayed contribution."""
    if math.isinf(half_life_s):
        return elapsed
    if half_life_s <= 0:
        return 0.0
    return half_life_s / LN2 * (1.0 - math.pow(0.5, elapsed / half_life_s))


def interval_usage(gpus: float, start: float, end: float, now: float, half_life_s: float) -> float:
    """Decayed GPU-seconds at `now` of `gpus` GPUs used from `start` to `end` (<= now): the
    interval's usage, decayed from its end. Nothing for an empty interval (end <= start). The
    ledger's one rule for a lease's contribution (allocation.ledger calls it; its SQL twin,
    `ledger_close_sql`, is held equal by tests/allocation/test_ledger_sql_property.py)."""
    if end <= start:
        return 0.0
    return decay(gpus * _integral(end - start, half_life_s), now - end, half_life_s)


def rebuild_ledger(intervals: Iterable[tuple[K, float, float | None, float]], now: float,
                   half_life_s: float) -> dict[K, float]:
    """Ledger per team at `now` from (team, start, end, gpus) usage intervals, e.g. lease rows
    (end None = still running; intervals are clipped to `now`). Equal to feeding the same
    history to `ledger_update` event by event."""
    ledger: dict[K, float] = {}
    for team, start, end, gpus in intervals:
        stop = now if end is None else min(end, now)
        if stop > start:
            ledger[team] = ledger.get(team, 0.0) + interval_usage(gpus, start, stop, now, half_life_s)
    return ledger


def mean_life(half_life_s: float) -> float:
    return half_life_s / LN2 if half_life_s > 0 else 1.0


def team_share(decayed_usage: float, allocated: float, weight: float, half_life_s: float) -> float:
    """The fair-share key (lower goes first); a weight <= 0 never goes first."""
    if weight <= 0:
        return math.inf
    return (decayed_usage / mean_life(half_life_s) + allocated) / weight


def entitled_allocation(capacity: float, demand: Mapping[str, float],
                        guaranteed: Mapping[str, float], limit: Mapping[str, float | None],
                        weight: Mapping[str, float]) -> dict[str, float]:
    """What each team should hold under this policy's rules when `capacity` GPUs are shared by
    teams wanting `demand`: weighted water-filling of allocation (the level λ with each team at
    min(want, max(floor, λ·weight))), where want = min(demand, limit) and floor =
    min(want, guaranteed). Guarantees that together exceed capacity shrink in proportion.
    The simulator's yardstick of fairness (entitled share)."""
    want = {}
    for team, value in demand.items():
        cap = limit.get(team)
        want[team] = max(0.0, value if cap is None else min(value, float(cap)))
    floor = {t: min(w, float(guaranteed.get(t, 0))) for t, w in want.items()}
    if sum(want.values()) <= capacity:
        return want
    if sum(floor.values()) >= capacity:
        scale = capacity / sum(floor.values())
        return {t: f * scale for t, f in floor.items()}

    def filled(level: float) -> float:
        return sum(min(want[t], max(floor[t], level * weight.get(t, 1.0))) for t in want)

    # filled() is piecewise linear and non-decreasing in the level: find the segment by its
    # breakpoints, then interpolate exactly.
    points = sorted({0.0} | {v / weight.get(t, 1.0) for t in want if weight.get(t, 1.0) > 0
                             for v in (floor[t], want[t])})
    low = 0.0
    for point in points:
        if filled(point) >= capacity:
            break
        low = point
    else:
        return want
    high = point
    f_low, f_high = filled(low), filled(high)
    level = high if f_high == f_low else low + (capacity - f_low) * (high - low) / (f_high - f_low)
    return {t: min(want[t], max(floor[t], level * weight.get(t, 1.0))) for t in want}
