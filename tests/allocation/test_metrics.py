"""`/metrics`: the pool series the contract names, read back with Prometheus's own parser after
real passes (grants, a priority preemption)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from allocation.engine import run_pass
from allocation.policy.codes import PendingCode

pytestmark = pytest.mark.django_db


def _samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = Client().get("/metrics").content.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_contract_series_count_what_the_passes_did(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    leases(pool, 8, gpus=1, team="a", priority="best-effort")
    run_pass([pool.pk])
    leases(pool, 1, gpus=2, team="b", priority="high")  # preempts two of a's best-effort leases
    leases(pool, 1, gpus=8, team="b")  # waits
    run_pass([pool.pk])
    got = _samples()
    assert got[("gpupool_team_gpus_held", (("pool", "gpus"), ("team", "a")))] == 6
    assert got[("gpupool_team_gpus_held", (("pool", "gpus"), ("team", "b")))] == 2
    # The queue by why it waits: summed over the codes, the pool's queue; every code has a series.
    pending = {dict(labels)["code"]: value for (name, labels), value in got.items()
               if name == "gpupool_leases_pending" and dict(labels)["pool"] == "gpus"}
    assert sum(pending.values()) == 1 and pending["no_capacity"] == 1
    assert set(pending) == {code.value for code in PendingCode}
    assert got[("gpupool_gpus", (("pool", "gpus"), ("state", "leased")))] == 8
    assert got[("gpupool_preemptions_total", (("cause", "priority"), ("pool", "gpus")))] == 2
    # Nine leases granted, each about an hour after its request (the fixture dates them an hour
    # back); the buckets only grow.
    assert got[("gpupool_admission_seconds_count", (("pool", "gpus"),))] == 9
    buckets = sorted(((float(dict(labels)["le"]), value) for (name, labels), value in got.items()
                      if name == "gpupool_admission_seconds_bucket" and dict(labels)["pool"] == "gpus"),
                     key=lambda b: b[0])
    assert buckets[-1] == (float("inf"), 9)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert dict(buckets)[900.0] == 0 and dict(buckets)[4 * 3600.0] == 9
    assert 9 * 3500 < got[("gpupool_admission_seconds_sum", (("pool", "gpus"),))] < 9 * 3700
    assert got[("gpupool_pass_duration_seconds_count", (("pool", "gpus"),))] >= 2
    assert got[("gpupool_ledger_drift", (("check", "gpu_state"),))] == 0
