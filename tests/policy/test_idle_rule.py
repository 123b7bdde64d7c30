"""The pure idle-reclaim rule: tables of samples in, busy / idle since T / warn / reclaim out."""

from __future__ import annotations

import pytest

from allocation.policy.idle import GpuTelemetry, IdleReclaim, IdleState, Verdict, evaluate, rule_for

RULE = IdleReclaim(below_util_pct=5, for_s=600, warn_s=120)
GAP = 150.0  # 2.5 sampling intervals of 60 s
NOW = 10_000.0


def series(*utils: float | None, every: float = 60.0, end: float = NOW) -> GpuTelemetry:
    """Samples every `every` seconds, the last at `end`, oldest first."""
    n = len(utils)
    return GpuTelemetry(tuple((end - (n - 1 - i) * every, u) for i, u in enumerate(utils)))


def judge(*gpus: GpuTelemetry, granted_at: float = 0.0, warned_at: float | None = None,
          now: float = NOW, rule: IdleReclaim = RULE) -> IdleState:
    return evaluate(gpus, rule, now=now, granted_at=granted_at, warned_at=warned_at, max_gap_s=GAP)


@pytest.mark.parametrize(("utils", "verdict", "idle_for"), [
    ([1] * 11, Verdict.WARN, 600),  # 11 samples a minute apart: idle for 10 minutes exactly
    ([1] * 10, Verdict.IDLE, 540),  # one minute short
    ([90] + [1] * 10, Verdict.IDLE, 540),  # busy before the run: the run starts after it
    ([1] * 10 + [5], Verdict.BUSY, None),  # the threshold itself is not below it
    ([1] * 5 + [50] + [1] * 5, Verdict.IDLE, 240),  # a burst of work restarts the run
    ([1] * 5 + [None] + [1] * 5, Verdict.IDLE, 240),  # a sample without a reading breaks it
    ([0.0] * 30, Verdict.WARN, 1740),
])
def test_one_gpu_idle_run(utils, verdict, idle_for) -> None:
    state = judge(series(*utils))
    assert state.verdict == verdict
    if idle_for is None:
        assert state.idle_since is None
    else:
        assert state.idle_since is not None and NOW - state.idle_since == idle_for


def test_no_samples_is_no_telemetry_and_never_reclaims() -> None:
    assert judge(GpuTelemetry(())).verdict == Verdict.NO_TELEMETRY
    # Even warned long ago: without telemetry the lease is not reclaimed.
    assert judge(GpuTelemetry(()), warned_at=0.0).verdict == Verdict.NO_TELEMETRY
    assert evaluate((), RULE, now=NOW, granted_at=0, warned_at=None, max_gap_s=GAP).verdict == Verdict.NO_TELEMETRY


def test_a_stale_newest_sample_is_no_telemetry() -> None:
    stale = series(*[1] * 20, end=NOW - GAP - 1)
    assert judge(stale).verdict == Verdict.NO_TELEMETRY
    assert judge(series(*[1] * 20, end=NOW - GAP)).verdict == Verdict.WARN  # within the gap: fresh


def test_the_newest_sample_without_a_reading_is_no_telemetry() -> None:
    assert judge(series(*[1] * 20, None)).verdict == Verdict.NO_TELEMETRY


def test_a_gap_restarts_the_idle_time_after_it() -> None:
    before = [(NOW - 2000 + 60 * i, 1.0) for i in range(10)]  # idle up to NOW - 1460
    after = [(NOW - 300 + 60 * i, 1.0) for i in range(6)]  # then nothing for 1160 s, idle again
    state = judge(GpuTelemetry((*before, *after)))
    assert state.verdict == Verdict.IDLE and state.idle_since == NOW - 300


def test_one_missed_sample_is_not_a_gap() -> None:
    samples = [(NOW - 60 * i, 1.0) for i in range(12) if i != 4]  # 120 s between two of them
    assert judge(GpuTelemetry(samples)).verdict == Verdict.WARN


def test_samples_from_before_the_grant_are_not_the_leases() -> None:
    state = judge(series(*[1] * 30), granted_at=NOW - 300)
    assert state.verdict == Verdict.IDLE and state.idle_since == NOW - 300
    # Granted just now: nothing of its own yet.
    assert judge(series(*[1] * 30), granted_at=NOW + 1).verdict == Verdict.NO_TELEMETRY


def test_a_foreign_gpu_counts_as_busy() -> None:
    idle = series(*[0] * 20)
    assert judge(idle).verdict == Verdict.WARN
    assert judge(GpuTelemetry(idle.samples, foreign=True)).verdict == Verdict.BUSY
    assert judge(idle, GpuTelemetry(idle.samples, foreign=True)).verdict == Verdict.BUSY


@pytest.mark.parametrize(("other", "verdict"), [
    (series(*[0] * 20), Verdict.WARN),  # both idle long enough
    (series(*[0] * 5), Verdict.IDLE),  # the other one only lately: idle since its run started
    (series(*[0] * 19, 80), Verdict.BUSY),  # one GPU busy: the lease is busy
    (GpuTelemetry(()), Verdict.NO_TELEMETRY),  # one GPU without telemetry: nothing is said
])
def test_every_gpu_of_the_lease_must_be_idle(other, verdict) -> None:
    state = judge(series(*[0] * 20), other)
    assert state.verdict == verdict
    if verdict == Verdict.IDLE:
        assert state.idle_since == NOW - 240  # the latest of the runs' starts


def test_warn_then_reclaim_after_warn_s() -> None:
    idle = series(*[0] * 20)
    first = judge(idle)
    assert first.verdict == Verdict.WARN and first.reclaim_at == NOW + 120
    assert judge(idle, warned_at=NOW - 119).verdict == Verdict.WARN
    assert judge(idle, warned_at=NOW - 120).verdict == Verdict.RECLAIM


def test_warn_s_zero_reclaims_without_a_notice() -> None:
    rule = IdleReclaim(5, 600, 0)
    assert judge(series(*[0] * 20), rule=rule).verdict == Verdict.RECLAIM


def test_a_warned_lease_whose_utilisation_rose_is_busy_again() -> None:
    assert judge(series(*[0] * 20, 60), warned_at=NOW - 500).verdict == Verdict.BUSY


def test_a_class_rule_wins_over_the_pool_rule() -> None:
    pool, cls = IdleReclaim(5, 600, 60), IdleReclaim(1, 60, 0)
    assert rule_for(cls, pool) is cls
    assert rule_for(None, pool) is pool
    assert rule_for(None, None) is None
