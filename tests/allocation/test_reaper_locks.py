"""The reaper decides on locked lease rows: what another transaction commits between its
unlocked read of the candidates and its write is honoured (a renewal keeps the lease, a bind
mark keeps the GPUs of a lease preempted with notice), and a lease another transaction holds
is skipped, not freed under it."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.services import reaper as reaper_services
from allocation.services.leases import lease_renew
from allocation.services.reaper import leases_reap
from core.db import db_now

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def granted(demo_fleet: Any, make_user: Any, api: Any) -> str:
    client = api(make_user("alice", teams=("vision",)))
    lease = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json").json()
    run_pass()
    assert Lease.objects.get(pk=lease["id"]).state == "granted"
    return str(lease["id"])


def _between_read_and_write(monkeypatch: Any, reader: str, commit: Any) -> None:
    """Run `commit` (its own transaction: the reaper's reads are outside one) right after the
    reaper's unlocked read `reader`, as another process committing at that moment would."""
    read = getattr(reaper_services, reader)

    def read_then_commit(now: Any) -> Any:
        found = read(now)
        assert found, "the lease was a candidate when read"
        commit()
        return found

    monkeypatch.setattr(reaper_services, reader, read_then_commit)


def test_a_renewal_committed_after_the_reapers_read_keeps_the_lease(granted: str, monkeypatch: Any) -> None:
    Lease.objects.filter(pk=granted).update(expires_at=db_now() - timedelta(seconds=1))
    _between_read_and_write(monkeypatch, "_expired_ids",
                            lambda: lease_renew(lease=granted, actor="alice", ttl_seconds=600))
    assert leases_reap()["expired"] == 0
    lease = Lease.objects.get(pk=granted)
    assert lease.state == "granted" and lease.gpu_links.filter(active=True).count() == 1


def _preempted_with_notice(lease_id: str) -> None:
    """Preempted, unbound, its notice (the class's grace) long run out: the reaper frees its GPUs."""
    Lease.objects.filter(pk=lease_id).update(state="preempted", ended_at=db_now(),
                                             ending_since=db_now() - timedelta(days=1))


def test_a_bind_mark_committed_after_the_reapers_read_keeps_the_gpus(granted: str, monkeypatch: Any) -> None:
    _preempted_with_notice(granted)
    _between_read_and_write(monkeypatch, "_notice_candidates",
                            lambda: Lease.objects.filter(pk=granted).update(binding_status={"bind": "started"}))
    assert leases_reap()["freed"] == 0
    assert Lease.objects.get(pk=granted).gpu_links.filter(active=True).count() == 1


def test_a_lease_another_transaction_holds_is_skipped_then_freed_by_the_next_reap(granted: str) -> None:
    _preempted_with_notice(granted)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Lease.objects.select_for_update().get(pk=granted)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert locked.wait(10)
    try:
        assert leases_reap()["freed"] == 0  # skipped at once, not waited for
    finally:
        release.set()
        holder.join(10)
    assert leases_reap()["freed"] == 1
    assert not Lease.objects.get(pk=granted).gpu_links.filter(active=True).exists()
