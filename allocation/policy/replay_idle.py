"""Idle reclaim in a trace replay, by the live rule (`allocation.policy.idle.evaluate`).

A trace job's `util_pct` (optional) is its GPUs' utilisation for its whole run, sampled without
gaps; a job without it has no telemetry and is never reclaimed, as in production. The rule is the
job's priority class's, else its pool's. A job below the threshold is warned `for_s` after its
start, and reclaimed `warn_s` after the warning (both asked of `evaluate` at those times, as the
live check would find them), unless it finishes first. A reclaimed job stops after its class's
grace and is done: the work of an idle job is not queued again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from allocation.policy.idle import GpuTelemetry, IdleReclaim, Verdict, evaluate, rule_for
from allocation.policy.types import PoolView, PriorityClassView


def _judge(util: float, rule: IdleReclaim, started: float, now: float, warned_at: float | None) -> Verdict:
    samples = GpuTelemetry(((started, util), (now, util)))
    return evaluate((samples,), rule, now=now, granted_at=started, warned_at=warned_at, max_gap_s=math.inf).verdict


class IdleReplay:
    """The rules of a replay's classes and pools, and when a job started at a time is reclaimed."""

    def __init__(self, pools: Mapping[str, PoolView]) -> None:
        self.pool_rules = {name: view.idle_reclaim for name, view in pools.items()}

    def reclaim_at(self, util_pct: float | None, cls: PriorityClassView, pool: str, started: float) -> float | None:
        """When a job with utilisation `util_pct` started at `started` is reclaimed if it runs on;
        None: never (no telemetry, no rule, or busy)."""
        rule = rule_for(cls.idle_reclaim, self.pool_rules.get(pool))
        if util_pct is None or rule is None:
            return None
        warn_at = started + rule.for_s
        first = _judge(util_pct, rule, started, warn_at, None)
        if first == Verdict.RECLAIM:  # warn_s 0: no notice
            return warn_at
        if first != Verdict.WARN:
            return None
        at = warn_at + rule.warn_s
        return at if _judge(util_pct, rule, started, at, warn_at) == Verdict.RECLAIM else None
