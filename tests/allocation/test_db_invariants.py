"""The database itself guards the invariants, bypassing all service code."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from allocation.models import Lease, LeaseGpu, PriorityClass, Quota, Team
from inventory.models import Gpu, Pool


def _lease(user, team, pool, pc) -> Lease:
    return Lease.objects.create(team=team, user=user, pool=pool, priority_class=pc, gpu_count=1,
                                ttl_seconds=60, state="granted")


@pytest.fixture
def fleet(demo_fleet, make_user):
    user = make_user("alice", teams=("vision",))
    return user, Team.objects.get(name="vision"), Pool.objects.get(name="training"), \
        PriorityClass.objects.get(name="default"), Gpu.objects.filter(pool__name="training").first()


@pytest.mark.django_db(transaction=True)
def test_a_gpu_cannot_be_in_two_active_leases_even_with_raw_inserts(fleet) -> None:
    user, team, pool, pc, gpu = fleet
    first, second = _lease(user, team, pool, pc), _lease(user, team, pool, pc)
    LeaseGpu.objects.create(lease=first, gpu=gpu, active=True)
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cur:
        cur.execute("INSERT INTO allocation_leasegpu (lease_id, gpu_id, active) VALUES (%s, %s, %s)",
                    [str(second.pk), gpu.pk, True])
    # Once the first link is inactive (lease ended), the GPU may be leased again.
    LeaseGpu.objects.filter(lease=first).update(active=False)
    LeaseGpu.objects.create(lease=second, gpu=gpu, active=True)
    assert LeaseGpu.objects.filter(gpu=gpu, active=True).get().lease_id == second.pk


@pytest.mark.django_db(transaction=True)
def test_the_database_refuses_the_second_active_lease_for_a_gpu_by_its_constraint(fleet) -> None:
    user, team, pool, pc, gpu = fleet
    a, b = _lease(user, team, pool, pc), _lease(user, team, pool, pc)
    with connection.cursor() as cur:
        cur.execute("INSERT INTO allocation_leasegpu (lease_id, gpu_id, active) VALUES (%s, %s, true)",
                    [str(a.pk), gpu.pk])
        with pytest.raises(IntegrityError) as err, transaction.atomic():
            cur.execute("INSERT INTO allocation_leasegpu (lease_id, gpu_id, active) VALUES (%s, %s, true)",
                        [str(b.pk), gpu.pk])
    assert "gpu_in_at_most_one_active_lease" in str(err.value)


@pytest.mark.django_db
def test_a_quota_limit_below_its_guarantee_is_refused_by_the_database(fleet) -> None:
    _, team, pool, _, _ = fleet
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.filter(team=team, pool=pool).update(guaranteed=10, limit=5)


@pytest.mark.django_db
def test_a_lending_limit_above_its_guarantee_is_refused_by_the_database(fleet) -> None:
    _, team, pool, _, _ = fleet
    Quota.objects.filter(team=team, pool=pool).update(guaranteed=8, limit=None, lending_limit=8)
    with pytest.raises(IntegrityError) as err, transaction.atomic():
        Quota.objects.filter(team=team, pool=pool).update(guaranteed=8, lending_limit=9)
    assert "quota_lending_limit_within_guaranteed" in str(err.value)
    with pytest.raises(IntegrityError), transaction.atomic():  # nor by lowering the guarantee
        Quota.objects.filter(team=team, pool=pool).update(guaranteed=7)
    assert Quota.objects.get(team=team, pool=pool).lending_limit == 8


@pytest.mark.django_db
def test_a_lease_for_zero_gpus_is_refused_by_the_database(fleet) -> None:
    user, team, pool, pc, _ = fleet
    with pytest.raises(IntegrityError), transaction.atomic():
        Lease.objects.create(team=team, user=user, pool=pool, priority_class=pc, gpu_count=0,
                             ttl_seconds=60)
