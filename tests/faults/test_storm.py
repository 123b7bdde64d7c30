"""Fault scenario (a): a storm of API operations from many clients against two workers, with no
fault but the load itself: creates with and without Idempotency-Key (keys sent twice), renewals,
releases, cordon/drain/uncordon, GPU moves between pools and quota changes, all at once.

`make test`: 3,000 member operations; `make faults`: 100,000."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.scenario import FULL, MEMBERS, begin, errors_outside, record_load, settle_and_check
from tests.faults.stack import Stack

OPS = 100_000 if FULL else 3_000

pytestmark = [pytest.mark.faults, pytest.mark.timeout(5400 if FULL else 600)]


def test_storm_of_api_operations_keeps_every_invariant(stack: Stack, tmp_path: Path) -> None:
    figures, sampler, load = begin(stack, "storm", tmp_path, ops_each=OPS // len(MEMBERS), duration_s=None)
    figures["faults_injected"] = "none (load only): 8 member clients + 1 admin client, 2 workers, beat"
    load.stop_admin_when_members_done()
    merged = load.finish()
    record_load(figures, merged)
    figures["load_wall_s"] = round(load.wall_s, 1)
    figures["ops_per_s"] = round(figures["api_requests"] / load.wall_s, 1)
    failures = errors_outside(merged, [])
    figures["5xx_or_conn_errors"] = len(failures)
    settle_and_check(stack, figures, sampler)
    assert figures["api_requests"] >= OPS
    assert not failures, failures[:10]
    assert merged["idempotency_mismatches"] == 0
