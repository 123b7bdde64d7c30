"""The bound that spares a create counting its team's queue (allocation.models.queues): never below
the queue's true size, whichever way leases enter it, so the caps hold as when every create
counted (tests/api/test_lease_queue_caps.py); and the exact count whenever it would refuse."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import OperationalError, connection, connections, transaction

from allocation.engine import run_pass
from allocation.models import Lease, QueueBound
from core.db import QUEUE_LOCKS, advisory_key, advisory_key_sql

FLEET = """
pools: [{name: gpus, queue_caps: {pending_leases_per_team: 3, pending_gpus_per_team: 10}}, {name: open}]
teams: [{name: a, members: [ann]}]
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 8}
  - {name: sim2, kind: simulated, pool: open, hosts: 1, gpus_per_host: 8, host_prefix: open}
"""


@pytest.fixture
def ann(apply_yaml: Any, make_user: Any, api: Any) -> Any:
    user = make_user("ann", teams=("a",))
    apply_yaml(FLEET)
    return api(user)


def _post(client: Any, gpus: int = 1, pool: str = "gpus") -> Any:
    return client.post("/api/v1/leases/", {"pool": pool, "gpus": gpus}, format="json")


def _bound() -> tuple[int, int] | None:
    row = QueueBound.objects.filter(pool_id=Lease.objects.filter(pool__name="gpus").values("pool_id")[:1]
                                    ).values_list("leases", "gpus").first()
    return None if row is None else (row[0], row[1])


def _pending() -> tuple[int, int]:
    rows = list(Lease.objects.filter(pool__name="gpus", state="pending").values_list("gpu_count", flat=True))
    return len(rows), sum(rows)


@pytest.mark.django_db
def test_creates_keep_one_bound_per_queue_without_counting(ann: Any) -> None:
    assert _post(ann, 8).status_code == 201
    assert _bound() == (1, 8)  # counted (none before), then the new lease added by the trigger
    run_pass()  # granted: the bound does not come down
    assert _pending() == (0, 0) and _bound() == (1, 8)
    assert [_post(ann).status_code for _ in range(2)] == [201, 201]
    assert _bound() == (3, 10)  # above the queue's true size (2, 2): a bound, not a count
    assert _post(ann, 2).status_code == 201  # the bound has no room for it (12 GPUs): counted
    assert _bound() == (3, 4) == _pending()
    assert _post(ann, pool="open").status_code == 201  # the default caps: a queue, a bound of its own
    assert sorted(QueueBound.objects.values_list("leases", "gpus")) == [(1, 1), (3, 4)]


@pytest.mark.django_db
def test_a_create_the_bound_cannot_admit_counts_and_the_count_becomes_the_bound(ann: Any) -> None:
    assert _post(ann, 8).status_code == 201
    run_pass()
    assert [_post(ann).status_code for _ in range(2)] == [201, 201]
    assert _bound() == (3, 10)  # one more would pass the cap of 3 leases by the bound alone
    Lease.objects.filter(pk__in=Lease.objects.filter(state="pending").values("pk")[:1]).delete()  # below the bound
    assert _post(ann).status_code == 201  # counted: 1 pending, room
    assert _bound() == (2, 2) and _pending() == (2, 2)
    assert _post(ann).status_code == 201
    full = _post(ann)
    assert full.status_code == 429  # the refusal is from a count: its figures are exact
    assert full.json()["details"]["pending_leases"] == 3 and full.json()["details"]["pending_gpus"] == 3


@pytest.mark.django_db
def test_every_way_into_the_queue_raises_the_bound(ann: Any) -> None:
    assert _post(ann, 8).status_code == 201
    run_pass()
    granted = Lease.objects.get(state="granted")
    assert _bound() == (1, 8)
    # Back to pending, as a requeue after a host loss does (allocation.services.reaper).
    Lease.objects.filter(pk=granted.pk).update(state="lost")
    Lease.objects.filter(pk=granted.pk).update(state="pending")
    assert _bound() == (2, 16)
    # Inserted pending by any other path.
    Lease.objects.bulk_create([Lease(team_id=granted.team_id, user_id=granted.user_id, pool_id=granted.pool_id,
                                     priority_class_id=granted.priority_class_id, gpu_count=1, ttl_seconds=60)])
    assert _bound() == (3, 17)
    # Other moves leave it: pending to granted, an update that does not move the state.
    Lease.objects.filter(state="pending").update(reason="x")
    assert _bound() == (3, 17)
    assert _post(ann).status_code == 201  # the bound says full; the count (2, 9) finds room
    assert _bound() == (3, 10) == _pending()


@pytest.mark.django_db(transaction=True)
def test_the_trigger_takes_the_queue_lock_creates_hold(ann: Any) -> None:
    """A lease entering the queue waits for a create deciding on it (the same advisory lock), so
    a create never decides from a bound that such a lease, committed meanwhile, raises."""
    assert _post(ann, 8).status_code == 201
    lease = Lease.objects.get()
    Lease.objects.filter(pk=lease.pk).update(state="lost")
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                key = advisory_key(QUEUE_LOCKS, lease.pool_id, lease.team_id)
                cur.execute("SELECT pg_advisory_xact_lock(%s)", [key])
                held.set()
                done.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic(), \
                connection.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '300ms'")
            cur.execute("UPDATE allocation_lease SET state = 'pending' WHERE id = %s", [lease.pk])
    finally:
        done.set()
        holder.join()
        connections.close_all()
    Lease.objects.filter(pk=lease.pk).update(state="pending")  # the lock free again: it goes through
    assert _bound() == (2, 16)


@pytest.mark.django_db
@pytest.mark.parametrize(("pool", "team"), [(1, 2), (16_777_215, 3), (16_777_217, 2**31 - 1)])
def test_the_triggers_lock_key_is_the_applications(pool: int, team: int) -> None:
    with connection.cursor() as cur:
        cur.execute(f"SELECT {advisory_key_sql(QUEUE_LOCKS, '%s', '%s')}", [pool, team])
        assert cur.fetchone()[0] == advisory_key(QUEUE_LOCKS, pool, team)


@pytest.mark.django_db
def test_a_pool_whose_caps_are_removed_keeps_no_bound(ann: Any, apply_yaml: Any) -> None:
    assert [_post(ann).status_code for _ in range(2)] == [201, 201]
    assert _bound() == (2, 2)
    apply_yaml(FLEET.replace("queue_caps: {pending_leases_per_team: 3, pending_gpus_per_team: 10}",
                             "queue_caps: {pending_leases_per_team: null, pending_gpus_per_team: null}"))
    assert _bound() is None
    assert [_post(ann).status_code for _ in range(4)] == [201] * 4  # uncapped: no bound written again
    assert _bound() is None  # so the trigger found none to raise, and took no lock
    apply_yaml(FLEET)  # capped again: the first create counts the queue, and is refused
    answer = _post(ann)
    assert answer.status_code == 429 and answer.json()["code"] == "queue_full"
    assert _bound() == (6, 6) == _pending()
