"""Capacity moves: the preview says what would happen without writing; confirm does exactly that."""

from __future__ import annotations

import re
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease, LeaseGpu
from allocation.selectors.capacity_preview import capacity_preview
from allocation.services.capacity import capacity_move
from allocation.services.leases import lease_create, lease_release
from core.errors import Conflict, DomainError
from inventory.models import Gpu, Host, Pool

pytestmark = pytest.mark.django_db


def host(name: str) -> Host:
    return Host.objects.get(name=name)


def snapshot_of_rows() -> tuple[Any, ...]:
    return (list(Gpu.objects.order_by("pk").values_list("pool_id", "state")),
            list(Host.objects.order_by("pk").values_list("state")),
            list(Lease.objects.order_by("pk").values_list("state")), AuditEvent.objects.count())


def test_keeping_a_lease_on_a_moved_host_leaves_its_team_over_the_limit(seeded: Any) -> None:
    inference = Pool.objects.get(name="inference")
    node = host(seeded.leases["research"].host.name)
    before = snapshot_of_rows()
    preview = capacity_preview(pool=inference, host_ids=[node.pk], mode="keep")
    assert snapshot_of_rows() == before  # the preview writes nothing
    assert preview.can_confirm and preview.units == 8 and preview.fence_host_ids == (node.pk,)
    pools = {p.pool: (p.capacity_before, p.capacity_after) for p in preview.pools}
    assert pools == {"training": (32, 24), "inference": (13, 21)}
    [impact] = [i for i in preview.leases if i.gpus_moved]
    assert (impact.lease_id, impact.outcome) == (str(seeded.leases["research"].pk), "over_limit")
    assert "may hold 4 and would occupy 8 (over by 4)" in impact.detail
    quota = next(q for q in preview.quotas if (q.team, q.pool) == ("research", "inference"))
    assert (quota.held_before, quota.held_after, quota.over_limit_by) == (0, 8, 4)

    result = capacity_move(pool=inference, host_ids=[node.pk], mode="keep", actor="root",
                                   fingerprint=preview.fingerprint)
    assert result.moved == 8 and result.fenced_hosts == (node.name,)
    assert set(Gpu.objects.filter(host=node).values_list("pool__name", flat=True)) == {"inference"}
    assert host(node.name).state == "cordoned"
    assert Lease.objects.get(pk=seeded.leases["research"].pk).state == "granted"  # kept running
    assert list(AuditEvent.objects.filter(actor="root").order_by("id").values_list("action", flat=True)) == [
        "host.cordon", "capacity.move"]
    # The target pool's next pass must not hand out GPUs the lease still holds.
    lease_create(user=seeded.users["carol"], pool=inference, gpus=8, same_host=False, ttl_seconds=60)
    run_pass()
    assert LeaseGpu.objects.filter(active=True, gpu__host=node).count() == 8


def test_draining_preempts_the_leases_on_moved_hosts(seeded: Any) -> None:
    inference = Pool.objects.get(name="inference")
    node = host(seeded.leases["research"].host.name)
    preview = capacity_preview(pool=inference, host_ids=[node.pk], mode="drain")
    [impact] = [i for i in preview.leases if i.gpus_moved]
    assert impact.outcome == "preempted" and "drained" in impact.detail
    quota = next(q for q in preview.quotas if (q.team, q.pool) == ("research", "inference"))
    assert quota.held_after == 0  # a preempted lease only sits out its grace
    capacity_move(pool=inference, host_ids=[node.pk], mode="drain", actor="root")
    lease = Lease.objects.get(pk=seeded.leases["research"].pk)
    assert lease.state == "preempted" and host(node.name).state == "draining"


def test_a_held_gpu_picked_alone_blocks_the_move(seeded: Any) -> None:
    inference = Pool.objects.get(name="inference")
    gpu = Gpu.objects.filter(host=seeded.leases["vision"].host)[0]
    preview = capacity_preview(pool=inference, gpu_ids=[gpu.pk])
    assert not preview.can_confirm and "select the whole host" in preview.blocked[0]
    before = snapshot_of_rows()
    assert preview.blocked[0].startswith(f"1 picked GPU(s) on {gpu.host.name} are held by lease")
    with pytest.raises(Conflict, match="held by lease"):
        capacity_move(pool=inference, gpu_ids=[gpu.pk], actor="root")
    assert snapshot_of_rows() == before


def test_a_stale_preview_is_not_confirmed(seeded: Any) -> None:
    inference, training = Pool.objects.get(name="inference"), Pool.objects.get(name="training")
    free = host("demo-node-3")
    waiting = lease_create(user=seeded.users["dave"], pool=inference, gpus=4, ttl_seconds=60)[0]
    preview = capacity_preview(pool=inference, host_ids=[free.pk])
    assert preview.fence_host_ids == ()
    assert [(i.lease_id, i.outcome) for i in preview.leases] == [(str(waiting.pk), "granted_next_pass")]
    # Meanwhile a lease lands on that host: what the admin saw no longer holds.
    lease_release(lease=seeded.leases["waiting"], actor="alice")
    lease_create(user=seeded.users["carol"], pool=training, gpus=1, ttl_seconds=60)
    run_pass([training.pk])
    assert LeaseGpu.objects.filter(active=True, gpu__host=free).exists()
    with pytest.raises(Conflict, match="changed since the preview"):
        capacity_move(pool=inference, host_ids=[free.pk], actor="root", fingerprint=preview.fingerprint)
    assert set(Gpu.objects.filter(host=free).values_list("pool__name", flat=True)) == {"training"}


def test_the_next_pass_would_reclaim_borrowed_gpus_when_the_pool_shrinks(demo_fleet: Any, make_user: Any) -> None:
    training, inference = Pool.objects.get(name="training"), Pool.objects.get(name="inference")
    users = {n: make_user(n, teams=(t,)) for n, t in [("alice", "vision"), ("dave", "research"), ("carol", "nlp")]}
    vision = lease_create(user=users["alice"], pool=training, gpus=8, ttl_seconds=600)[0]
    research = lease_create(user=users["dave"], pool=training, gpus=8, ttl_seconds=600)[0]
    run_pass()
    holding = set(Lease.objects.filter(pk__in=[vision.pk, research.pk], host__isnull=False)
                  .values_list("host_id", flat=True))
    free_hosts = list(Host.objects.filter(source__pool=training).exclude(pk__in=holding).values_list("pk", flat=True))
    nlp = lease_create(user=users["carol"], pool=training, gpus=8, ttl_seconds=600)[0]  # within its guarantee
    preview = capacity_preview(pool=inference, host_ids=free_hosts)
    outcomes = {i.lease_id: i.outcome for i in preview.leases}
    assert outcomes == {str(research.pk): "preempted_next_pass"}, preview.leases
    assert Lease.objects.get(pk=nlp.pk).state == "pending"


def test_empty_or_already_placed_selections_move_nothing(seeded: Any) -> None:
    inference = Pool.objects.get(name="inference")
    assert not capacity_preview(pool=inference).can_confirm
    lab = host("lab-a100-0")
    preview = capacity_preview(pool=inference, host_ids=[lab.pk])
    assert preview.gpu_ids == () and "already in pool inference" in preview.notes[0]
    with pytest.raises(DomainError, match="nothing to move"):
        capacity_move(pool=inference, host_ids=[lab.pk], actor="root")
    with pytest.raises(DomainError, match="unknown mode"):
        capacity_preview(pool=inference, host_ids=[lab.pk], mode="yolo")
    mig = capacity_preview(pool=Pool.objects.get(name="training"), gpu_ids=[Gpu.objects.get(uuid="GPU-lab-0").pk])
    assert mig.units == 2 and any("MIG" in n for n in mig.notes)


def test_the_capacity_page_previews_and_confirms(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["root"])
    node = host(seeded.leases["research"].host.name)
    form = {"pool": "inference", "hosts": [node.pk], "mode": "keep"}
    preview = client.post("/capacity/preview/", form, HTTP_HX_REQUEST="true")
    body = preview.content.decode()
    assert preview.status_code == 200 and 'data-outcome="over_limit"' in body and 'id="confirm-btn"' in body
    stale = client.post("/capacity/confirm/", {**form, "fingerprint": "0" * 16}, HTTP_HX_REQUEST="true")
    assert stale.status_code == 409 and stale["HX-Retarget"] == "#preview" and "changed since" in stale.content.decode()
    fingerprint = preview.context["preview"].fingerprint
    done = client.post("/capacity/confirm/", {**form, "fingerprint": fingerprint}, HTTP_HX_REQUEST="true")
    assert done.status_code == 200 and "Moved 8 GPU(s) to pool inference" in done.content.decode()
    assert client.post("/capacity/preview/", {"mode": "keep"}, HTTP_HX_REQUEST="true").status_code == 422


def test_the_capacity_page_works_without_javascript(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["root"])
    form = {"pool": "inference", "hosts": [host("demo-node-3").pk], "mode": "keep"}
    page = client.post("/capacity/preview/", form)
    body = page.content.decode()
    assert page.status_code == 200 and "<html" in body and 'id="preview-result"' in body
    pk = host("demo-node-3").pk
    assert re.search(rf'id="pick-host-{pk}" data-host-toggle\s+checked', body)  # the selection is kept
    done = client.post("/capacity/confirm/", {**form, "fingerprint": page.context["preview"].fingerprint}, follow=True)
    assert "Moved 8 GPU(s) to pool inference" in done.content.decode()
