"""A pass runs without cyclic garbage collection (no collection pause while the pool is locked)
and leaves the collector as it found it, even when the pass fails."""

from __future__ import annotations

import gc
from typing import Any

import pytest

import allocation.engine
from allocation.engine import run_pass

pytestmark = pytest.mark.django_db


def test_the_collector_is_off_during_a_pass_and_back_on_after_it(fleet, leases, monkeypatch) -> None:
    pool = fleet(hosts=1)
    leases(pool, 1, gpus=1)
    seen = []
    real = allocation.engine.read_pool

    def spy(*a: Any, **kw: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*a, **kw)

    monkeypatch.setattr(allocation.engine, "read_pool", spy)
    assert gc.isenabled()
    assert len(run_pass([pool.pk])[0].granted) == 1
    assert seen == [False] and gc.isenabled()

    monkeypatch.setattr(allocation.engine, "read_pool", lambda *a, **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run_pass([pool.pk])
    assert gc.isenabled()
