"""inventory.sync.sync_source: facts in, rows out, in bulk, whatever the source."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.base import Discovery, GpuFact, GpuProcess, HostFact
from inventory.models import Gpu, Host, Pool, Source
from inventory.sync import hosts_mark_stale, sync_source

pytestmark = pytest.mark.django_db


@pytest.fixture
def source() -> Source:
    pool = Pool.objects.create(name="p")
    return Source.objects.create(name="s", kind="simulated", pool=pool, interval_s=30)


def host(name: str, n: int = 2, **kw) -> HostFact:
    gpus = kw.pop("gpus", None) or tuple(
        GpuFact(uuid=f"GPU-{name}-{i}", index=i, model="NVIDIA A100-SXM4-80GB", memory_mb=81920)
        for i in range(n))
    return HostFact(name=name, address=f"{name}.lab", driver_version="535.54.03", cuda_version="12.2",
                    gpus=gpus, **kw)


def test_new_gpus_join_the_sources_pool_and_a_resync_changes_nothing(source: Source) -> None:
    report = sync_source(source, Discovery(hosts=(host("a"), host("b", 4))))
    assert report.created == 6 and report.hosts_seen == 2
    assert Gpu.objects.filter(pool=source.pool, state="free").count() == 6
    assert Host.objects.get(name="b").driver_version == "535.54.03"
    again = sync_source(source, Discovery(hosts=(host("a"), host("b", 4))))
    assert (again.created, again.updated, again.gone) == (0, 0, 0)


def test_the_number_of_queries_does_not_grow_with_the_fleet(source: Source) -> None:
    sync_source(source, Discovery(hosts=(host("a"),)))
    with CaptureQueriesContext(connection) as small:
        sync_source(source, Discovery(hosts=tuple(host(f"h{i}", 8) for i in range(5))))
    with CaptureQueriesContext(connection) as big:
        sync_source(source, Discovery(hosts=tuple(host(f"h{i}", 8) for i in range(60))))
    assert len(big) <= len(small) + 2, (len(small), len(big))


def test_a_vanished_gpu_is_marked_gone_and_its_lease_becomes_lost(source: Source, make_user) -> None:
    from allocation.models import Lease, LeaseGpu, PriorityClass, Team

    sync_source(source, Discovery(hosts=(host("a", 2),)))
    gpu = Gpu.objects.get(uuid="GPU-a-1")
    user = make_user("u", teams=("t",))
    lease = Lease.objects.create(team=Team.objects.get(name="t"), user=user, pool=source.pool,
                                 priority_class=PriorityClass.objects.create(name="default"),
                                 gpu_count=1, ttl_seconds=600, state="granted", granted_at=timezone.now(),
                                 host=gpu.host)
    LeaseGpu.objects.create(lease=lease, gpu=gpu)
    Gpu.objects.filter(pk=gpu.pk).update(leased=True)

    one_left = host("a", gpus=(GpuFact(uuid="GPU-a-0", index=0, model="NVIDIA A100-SXM4-80GB"),))
    report = sync_source(source, Discovery(hosts=(one_left,)))
    assert report.gone == 1
    gpu.refresh_from_db()
    assert gpu.gone and gpu.state == "offline"
    lease.refresh_from_db()
    assert lease.state == "lost" and "no longer reported" in lease.reason
    assert not LeaseGpu.objects.filter(active=True).exists()


def test_an_unreachable_host_goes_offline_with_its_error_and_keeps_its_gpus(source: Source) -> None:
    sync_source(source, Discovery(hosts=(host("a"),)))
    sync_source(source, Discovery(hosts=(HostFact(name="a", error="connection refused on port 22"),)))
    h = Host.objects.get(name="a")
    assert h.state == "offline" and h.error == "connection refused on port 22"
    assert Gpu.objects.filter(host=h, gone=False, state="offline").count() == 2
    sync_source(source, Discovery(hosts=(host("a"),)))
    h.refresh_from_db()
    assert h.state == "ready" and h.error == "" and h.offline_since is None
    assert Gpu.objects.filter(host=h, state="free").count() == 2


def test_a_whole_source_failure_is_recorded_without_touching_hosts(source: Source) -> None:
    sync_source(source, Discovery(hosts=(host("a"),)))
    sync_source(source, Discovery(error="API server https://k8s:6443 unreachable"))
    source.refresh_from_db()
    assert "unreachable" in source.last_error
    assert Host.objects.get(name="a").state == "ready"


def test_hosts_not_heard_from_for_several_intervals_go_offline(source: Source) -> None:
    sync_source(source, Discovery(hosts=(host("a"),)), now=timezone.now() - timedelta(minutes=10))
    assert hosts_mark_stale() == 1
    h = Host.objects.get(name="a")
    assert h.state == "offline" and "not heard from" in h.error
    assert set(Gpu.objects.filter(host=h).values_list("state", flat=True)) == {"offline"}


def test_mig_slices_point_at_their_parent_and_health_and_processes_set_state(source: Source) -> None:
    gpus = (
        GpuFact(uuid="GPU-p", index=0, model="NVIDIA H100 80GB HBM3", memory_mb=81559),
        GpuFact(uuid="MIG-1", index=0, model="NVIDIA H100 80GB HBM3", memory_mb=9856,
                mig_profile="1g.10gb", parent_uuid="GPU-p"),
        GpuFact(uuid="GPU-sick", index=1, model="NVIDIA H100 80GB HBM3", health="unhealthy",
                health_reason="2 uncorrected ECC errors"),
        GpuFact(uuid="GPU-busy", index=2, model="NVIDIA H100 80GB HBM3",
                processes=(GpuProcess(pid=4242, used_memory_mb=1000),)),
    )
    sync_source(source, Discovery(hosts=(host("m", gpus=gpus),)))
    mig = Gpu.objects.get(uuid="MIG-1")
    assert mig.parent_uuid == "GPU-p" and mig.mig_profile == "1g.10gb"
    assert Gpu.objects.get(uuid="GPU-sick").state == "unhealthy"
    assert Gpu.objects.get(uuid="GPU-busy").state == "foreign"


def test_a_counted_foreign_use_marks_that_many_unleased_gpus_foreign_stably(source: Source) -> None:
    sync_source(source, Discovery(hosts=(host("k", 4, foreign_gpus=2),)))
    first = set(Gpu.objects.filter(state="foreign").values_list("uuid", flat=True))
    assert len(first) == 2
    report = sync_source(source, Discovery(hosts=(host("k", 4, foreign_gpus=2),)))
    assert report.updated == 0
    assert set(Gpu.objects.filter(state="foreign").values_list("uuid", flat=True)) == first
    sync_source(source, Discovery(hosts=(host("k", 4, foreign_gpus=0),)))
    assert not Gpu.objects.filter(state="foreign").exists()


def test_cordoned_and_offline_reports_from_the_source_show_on_gpus(source: Source) -> None:
    sync_source(source, Discovery(hosts=(host("c", state="cordoned"), host("o", state="offline"))))
    assert set(Gpu.objects.filter(host__name="c").values_list("state", flat=True)) == {"cordoned"}
    assert set(Gpu.objects.filter(host__name="o").values_list("state", flat=True)) == {"offline"}


def test_time_sliced_replicas_record_their_physical_gpu_and_our_process_is_not_foreign(source: Source) -> None:
    from agents.time_slicing import replicate

    busy = (GpuFact(uuid="GPU-ts", index=0, model="Tesla T4", memory_mb=15360,
                    processes=(GpuProcess(pid=7),)),)
    facts = Discovery(hosts=(host("v", gpus=replicate(busy, 4)),))
    sync_source(source, facts)
    replicas = Gpu.objects.filter(physical_uuid="GPU-ts").order_by("uuid")
    assert [(g.shared_replicas, g.state) for g in replicas] == [(4, "foreign")] * 4  # not ours
    Gpu.objects.filter(uuid="GPU-ts").update(leased=True, state="leased")  # replica 0: the GPU's own uuid
    report = sync_source(source, facts)
    assert report.updated == 4  # the process is the lease's: no replica of its GPU is foreign
    assert [g.state for g in replicas.all()] == ["leased", "free", "free", "free"]
    assert sync_source(source, facts).updated == 0  # and stay so: no flapping


def test_turning_time_slicing_on_and_off_keeps_the_gpus_own_row_and_its_lease(source: Source) -> None:
    from agents.time_slicing import replicate

    plain = host("v", 1)
    sync_source(source, Discovery(hosts=(plain,)))
    Gpu.objects.filter(uuid="GPU-v-0").update(leased=True)
    report = sync_source(source, Discovery(hosts=(host("v", gpus=replicate(plain.gpus, 3)),)))
    assert (report.created, report.gone) == (2, 0)
    assert Gpu.objects.get(uuid="GPU-v-0").physical_uuid == "GPU-v-0"
    report = sync_source(source, Discovery(hosts=(plain,)))
    assert report.gone == 2 and Gpu.objects.get(uuid="GPU-v-0").physical_uuid == ""
