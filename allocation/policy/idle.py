"""Idle reclaim: whether a granted lease's GPUs sat idle long enough to warn, then to reclaim.

Pure (no Django, no I/O). The live task (`allocation.services.idle`) and the simulator
(`policy/replay_idle.py`) call the very same `evaluate`.

The rule (`pools[].idle_reclaim`, `priority_classes[].idle_reclaim`; a class's setting wins over
its pool's, none: no idle reclaim):
- A lease is **idle** only while *every* GPU of it is: no foreign process on it (a GPU someone
  else uses is busy, whatever its utilisation) and every utilisation sample taken since the lease
  was granted, back to the start of its idle run, reads below `below_util_pct`.
- A GPU's **idle run** is the latest unbroken series of samples below the threshold: it starts at
  the oldest sample of that series. It is broken by a sample at or above the threshold (busy), by
  a sample without a reading, and by a **gap**: two samples more than `max_gap_s` apart, or the
  newest sample older than `max_gap_s` (stale). Nothing is assumed about unobserved time, so
  after a gap the idle time counts again from the first sample after it; and with a stale newest
  sample, or none at all, the lease has **no telemetry**: it is never warned nor reclaimed.
  Samples from before the grant are not the lease's and are ignored.
- The lease is idle since the latest of its GPUs' idle-run starts (all of them idle from then).
  Idle for `for_s` or more: **warn** (the warning is the user's notice). Reclaim once the warning
  has stood `warn_s` (`warn_s: 0` reclaims at once, with no notice). Anything else (busy, no
  telemetry, idle for less than `for_s`: a burst of work restarted the run) clears a warning.

The same runs flag allocated but idle GPUs (`allocation.services.idle_gpus`): `IdleRun` is one
GPU's run carried from check to check (`idle_run_advance` folds in the samples that came since,
agreeing with `gpu_idle_since` over all of them), flagged once it is `for_s` long
(`idle_run_flagged_at`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class IdleReclaim:
    """`idle_reclaim: {below_util_pct, for_s, warn_s}` of a pool or a priority class."""

    below_util_pct: float
    for_s: float
    warn_s: float


@dataclass(frozen=True)
class GpuTelemetry:
    """One GPU of a lease as the rule sees it: its samples `(at, utilization_pct or None)`,
    oldest first (any order is accepted), and whether a foreign process uses it."""

    samples: Sequence[tuple[float, float | None]]
    foreign: bool = False


class Verdict(enum.StrEnum):
    NO_TELEMETRY = "no_telemetry"  # some GPU has no recent samples: never reclaimed
    BUSY = "busy"  # some GPU is above the threshold, foreign, or its idle run is too short
    IDLE = "idle"  # every GPU idle since `idle_since`, for less than `for_s` so far
    WARN = "warn"  # idle for `for_s` or more: warn now (or keep the warning standing)
    RECLAIM = "reclaim"  # warned `warn_s` ago and still idle


@dataclass(frozen=True)
class IdleState:
    verdict: Verdict
    idle_since: float | None = None  # IDLE, WARN, RECLAIM: since when every GPU is idle
    reclaim_at: float | None = None  # WARN: when it will be reclaimed if it stays idle


def gpu_idle_since(gpu: GpuTelemetry, threshold: float, *, since: float, now: float,
                   max_gap_s: float) -> float | Verdict:
    """The start of the GPU's idle run (module docstring), or BUSY (foreign, or its newest
    sample reads at or above `threshold`), or NO_TELEMETRY (no sample at or after `since`, the
    grant, or the newest older than `max_gap_s`, or without a reading)."""
    if gpu.foreign:
        return Verdict.BUSY
    samples = sorted((s for s in gpu.samples if s[0] >= since), reverse=True)
    if not samples or now - samples[0][0] > max_gap_s or samples[0][1] is None:
        return Verdict.NO_TELEMETRY
    if samples[0][1] >= threshold:
        return Verdict.BUSY
    start = samples[0][0]
    for at, util in samples[1:]:
        if util is None or util >= threshold or start - at > max_gap_s:
            break
        start = at
    return start


def evaluate(gpus: Sequence[GpuTelemetry], rule: IdleReclaim, *, now: float, granted_at: float,
             warned_at: float | None, max_gap_s: float) -> IdleState:
    """The verdict on one lease now (module docstring). `warned_at`: when its standing warning
    was given (None: not warned). A lease without GPUs has no telemetry."""
    if not gpus:
        return IdleState(Verdict.NO_TELEMETRY)
    latest = -math.inf
    worst: Verdict | None = None
    for gpu in gpus:
        start = gpu_idle_since(gpu, rule.below_util_pct, since=granted_at, now=now, max_gap_s=max_gap_s)
        if start is Verdict.NO_TELEMETRY:
            return IdleState(Verdict.NO_TELEMETRY)  # wins over busy: nothing to say for this lease
        if isinstance(start, Verdict):
            worst = start
        else:
            latest = max(latest, start)
    if worst is not None:
        return IdleState(worst)
    if now - latest < rule.for_s:
        return IdleState(Verdict.IDLE, idle_since=latest)
    reclaim_at = (now if warned_at is None else warned_at) + rule.warn_s
    if now >= reclaim_at:
        return IdleState(Verdict.RECLAIM, idle_since=latest)
    return IdleState(Verdict.WARN, idle_since=latest, reclaim_at=reclaim_at)


def rule_for(class_rule: IdleReclaim | None, pool_rule: IdleReclaim | None) -> IdleReclaim | None:
    """The rule a lease follows: its priority class's, else its pool's, else none."""
    return class_rule if class_rule is not None else pool_rule


def warning_text(rule: IdleReclaim, gpus: int, *, since: str, reclaim_at: str) -> str:
    """The words of a warning (the `warning` field, the audit event, the reason); times as the
    caller writes them."""
    return (f"idle: {_all(gpus)} below {rule.below_util_pct:g}% utilisation since {since} "
            f"(for {rule.for_s:g} s or more); reclaimed at {reclaim_at} unless utilisation rises "
            "or an admin renews it with keep=true")


def reclaim_text(rule: IdleReclaim, gpus: int, *, since: str) -> str:
    """Why an idle lease was reclaimed (its reason once preempted)."""
    return (f"reclaimed for idleness: {_all(gpus)} below {rule.below_util_pct:g}% utilisation "
            f"since {since}, after a warning of {rule.warn_s:g} s")


def _all(gpus: int) -> str:
    return "its GPU" if gpus == 1 else f"all {gpus} GPUs"


# --- allocated but idle, one GPU at a time, carried from check to check ---------------------------
@dataclass(frozen=True)
class IdleRun:
    """A GPU's idle run as the last check left it: `since`, the oldest sample of its unbroken run
    below the threshold (None: not idle); `seen_at`, the newest sample folded in (None: none yet).
    Each check carries it on with the samples that came since (`idle_run_advance`), so it reads
    each sample once, and agrees with `gpu_idle_since` over all of them."""

    since: float | None = None
    seen_at: float | None = None


def idle_run_advance(run: IdleRun, samples: Iterable[tuple[float, float | None]], threshold: float, *,
                     max_gap_s: float) -> IdleRun:
    """`run` carried on with `samples` `(at, utilization_pct or None)`, any order; those at or
    before `run.seen_at` are ignored. The rules of `gpu_idle_since`: a sample without a reading or
    at or above `threshold` breaks the run; one more than `max_gap_s` after the sample before it
    starts a new run."""
    since, seen = run.since, run.seen_at
    for at, util in sorted(samples, key=lambda sample: sample[0]):
        if seen is not None and at <= seen:
            continue
        if util is None or util >= threshold:
            since = None
        elif since is None or (seen is not None and at - seen > max_gap_s):
            since = at
        seen = at
    return IdleRun(since, seen)


def idle_run_flagged_at(run: IdleRun, *, for_s: float, now: float, max_gap_s: float) -> float | None:
    """When the GPU's run reached `for_s` (it is then flagged: allocated but idle), or None: not
    idle that long, or its newest sample is more than `max_gap_s` old (no telemetry, which
    `evaluate` never reclaims either)."""
    if run.since is None or run.seen_at is None or now - run.seen_at > max_gap_s:
        return None
    # `now - since >= for_s`, the very comparison `evaluate` makes: `since + for_s <= now` can
    # differ from it in the last bit of a float and flag a run `evaluate` would not.
    return run.since + for_s if now - run.since >= for_s else None
