"""`gpupool top --once` prints one frame: pools, the caller's quotas and the queue."""

from __future__ import annotations

import json

import pytest


@pytest.mark.django_db(transaction=True)
def test_top_once_shows_pools_quotas_and_the_queue(server) -> None:
    server.run("request", "--gpus", "4", "--pool", "training")
    code, out, _ = server.run("top", "--once")
    assert code == 0
    assert "POOL" in out and "training" in out and "inference" in out
    assert "GUARANTEED" in out and "vision" in out
    assert "queue (1 pending)" in out and "alice" in out
    _, out, _ = server.run("top", "--once", "-o", "json")
    frame = json.loads(out)
    assert len(frame["queue"]) == 1 and {q["team"] for q in frame["quotas"]} == {"vision"}
