"""Binding writes the database's clock, not the worker's: a worker whose clock runs five minutes
ahead ends a lease at the database's now (its ended_at, the ledger's and meter's end), not five
minutes in the future."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.workloads.binding import lease_bind
from core.db import db_now

pytestmark = pytest.mark.django_db

SKEW = timedelta(minutes=5)


def test_a_bind_that_fails_ends_the_lease_on_the_database_clock(demo_fleet: Any, make_user: Any, api: Any,
                                                                 monkeypatch: Any) -> None:
    client = api(make_user("alice", teams=("vision",)))
    lease_id = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json").json()["id"]
    run_pass()
    # A granted lease with a workload to start and no host left to start it on: the bind fails it.
    Lease.objects.filter(pk=lease_id).update(binding_spec={"kind": "process", "command": ["true"]}, host=None)
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + SKEW)  # this worker's clock, 5 min ahead
    before = db_now()
    assert lease_bind(lease_id) == "failed"
    after = db_now()
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == "failed" and lease.ended_at is not None
    assert before <= lease.ended_at <= after, (lease.ended_at, before, after)
    failed = lease.audit_events.get(action="lease.failed")
    assert before <= failed.at <= after, (failed.at, before, after)
