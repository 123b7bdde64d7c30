"""A GPU's idle run carried from check to check (`idle_run_advance`) agrees with the run read from
all its samples at once (`gpu_idle_since`, the rule idle reclaim judges by), however the samples
are cut into checks; and the flag (`idle_run_flagged_at`) is up exactly when that run is `for_s`
long and its newest sample fresh. Pure: no database."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from allocation.policy.idle import (
    GpuTelemetry,
    IdleRun,
    Verdict,
    gpu_idle_since,
    idle_run_advance,
    idle_run_flagged_at,
)

GAP = 150.0
THRESHOLD = 5.0

# Strictly increasing sample times (gaps of 1 s to 5 min, some over GAP) and readings that are
# missing, idle or busy.
steps = st.lists(st.tuples(st.floats(1.0, 300.0), st.one_of(st.none(), st.floats(0.0, 4.9), st.floats(5.0, 100.0))),
                 max_size=40)


def _series(raw: list[tuple[float, float | None]]) -> list[tuple[float, float | None]]:
    at, out = 0.0, []
    for step, util in raw:
        at += step
        out.append((at, util))
    return out


@settings(max_examples=300, deadline=None)
@given(steps, st.lists(st.integers(0, 40), max_size=6), st.floats(0.0, 400.0), st.floats(60.0, 3600.0))
def test_carried_runs_agree_with_the_run_read_at_once(raw: list[tuple[float, float | None]], cuts: list[int],
                                                      later: float, for_s: float) -> None:
    samples = _series(raw)
    run = IdleRun()
    start = 0
    for cut in [*sorted(cuts), len(samples)]:
        run = idle_run_advance(run, samples[start:cut] + samples[:start], THRESHOLD, max_gap_s=GAP)  # old ones ignored
        start = max(start, cut)
    assert run == idle_run_advance(IdleRun(), list(reversed(samples)), THRESHOLD, max_gap_s=GAP)
    now = (samples[-1][0] if samples else 0.0) + later
    whole = gpu_idle_since(GpuTelemetry(samples), THRESHOLD, since=0.0, now=now, max_gap_s=GAP)
    flagged = idle_run_flagged_at(run, for_s=for_s, now=now, max_gap_s=GAP)
    if isinstance(whole, Verdict):
        assert flagged is None
    else:
        assert run.since == whole
        assert (flagged is not None) == (now - whole >= for_s)
        assert flagged is None or flagged == whole + for_s


def test_a_gap_starts_a_new_run_and_a_busy_sample_ends_it() -> None:
    run = idle_run_advance(IdleRun(), [(0.0, 1.0), (60.0, 1.0), (400.0, 2.0), (460.0, 0.0)], THRESHOLD, max_gap_s=GAP)
    assert run == IdleRun(since=400.0, seen_at=460.0)
    assert idle_run_advance(run, [(520.0, 50.0)], THRESHOLD, max_gap_s=GAP) == IdleRun(None, 520.0)
    assert idle_run_advance(run, [(520.0, None)], THRESHOLD, max_gap_s=GAP) == IdleRun(None, 520.0)


def test_the_flag_waits_for_the_idle_time_and_falls_with_stale_telemetry() -> None:
    run = IdleRun(since=1000.0, seen_at=1600.0)
    assert idle_run_flagged_at(run, for_s=600.0, now=1599.0, max_gap_s=GAP) is None
    assert idle_run_flagged_at(run, for_s=600.0, now=1650.0, max_gap_s=GAP) == 1600.0
    assert idle_run_flagged_at(run, for_s=600.0, now=1600.0 + GAP + 1, max_gap_s=GAP) is None
    assert idle_run_flagged_at(IdleRun(), for_s=0.0, now=10.0, max_gap_s=GAP) is None
