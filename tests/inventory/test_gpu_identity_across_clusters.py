"""Two Kubernetes clusters with a node of the same name are two hosts with two sets of GPUs, and
the migration that qualifies the synthetic uuids keeps existing rows and their leases."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.utils import timezone

from agents.k8s_resources import gpu_uuid, resource_for_uuid
from inventory.discovery import source_discover
from inventory.models import Gpu, Host, Pool, Source
from tests.support.kube import gpu_node, running_kube_api
from tests.support.kube_server import KubeApiServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_clusters() -> Iterator[tuple[KubeApiServer, KubeApiServer]]:
    with running_kube_api() as a, running_kube_api() as b:
        yield a, b


def _sources(a: KubeApiServer, b: KubeApiServer) -> tuple[Source, Source]:
    pool = Pool.objects.create(name="mixed")
    ka = Source.objects.create(name="ka", kind="kubernetes", pool=pool, config={"host": a.url, "request_timeout": 2})
    kb = Source.objects.create(name="kb", kind="kubernetes", pool=pool, config={"host": b.url, "request_timeout": 2})
    return ka, kb


def test_a_node_name_in_two_clusters_is_two_hosts_whose_gpus_never_flip(two_clusters: Any) -> None:
    a, b = two_clusters
    a.load_nodes([gpu_node("gpu-node-1", 2)])
    b.load_nodes([gpu_node("gpu-node-1", 4)])
    ka, kb = _sources(a, b)
    for _ in range(3):  # every discovery, in either order, leaves each row with its own cluster
        source_discover(source=ka)
        source_discover(source=kb)
    assert Host.objects.filter(name="gpu-node-1").count() == 2
    assert Gpu.objects.filter(host__source=ka, gone=False).count() == 2
    assert Gpu.objects.filter(host__source=kb, gone=False).count() == 4
    assert set(Gpu.objects.filter(host__source=kb).values_list("uuid", flat=True)) == {
        f"k8s-kb:gpu-node-1-gpu-{i}" for i in range(4)}

    # The second cluster's node goes NotReady: only its own GPUs go offline.
    b.load_nodes([gpu_node("gpu-node-1", 4, ready=False)])
    source_discover(source=kb)
    assert set(Gpu.objects.filter(host__source=ka).values_list("state", flat=True)) == {"free"}
    assert set(Gpu.objects.filter(host__source=kb).values_list("state", flat=True)) == {"offline"}


def test_synthetic_uuids_map_back_to_their_resource_only_for_their_own_source() -> None:
    uuid = gpu_uuid("n1", "nvidia.com/mig-1g.10gb", 3, "kb")
    assert uuid == "k8s-kb:n1-mig-1g.10gb-3"
    assert resource_for_uuid("n1", uuid, "kb") == "nvidia.com/mig-1g.10gb"
    assert resource_for_uuid("n1", uuid, "ka") == "nvidia.com/gpu"
    long_name = "n" * 253
    assert len(gpu_uuid(long_name, "nvidia.com/mig-7g.80gb", 127, "s" * 64)) <= 255
    assert resource_for_uuid(long_name, gpu_uuid(long_name, "nvidia.com/mig-7g.80gb", 1, "k"), "k") \
        == "nvidia.com/mig-7g.80gb"


def test_the_migration_qualifies_old_uuids_and_keeps_rows_and_leases(make_user: Any) -> None:
    from allocation.models import Lease, LeaseGpu, PriorityClass, Team

    pool = Pool.objects.create(name="p")
    source = Source.objects.create(name="prod", kind="kubernetes", pool=pool, config={"host": "http://x"})
    ssh = Source.objects.create(name="lab", kind="ssh", pool=pool, config={})
    host = Host.objects.create(source=source, name="node-1")
    old = Gpu.objects.create(uuid="k8s-node-1-gpu-0", host=host, pool=pool, model="NVIDIA A16")
    vm = Gpu.objects.create(uuid="GPU-1234", host=Host.objects.create(source=ssh, name="vm"), pool=pool, model="A16")
    user = make_user("u", teams=("t",))
    lease = Lease.objects.create(team=Team.objects.get(name="t"), user=user, pool=pool, gpu_count=1,
                                 priority_class=PriorityClass.objects.create(name="default"), ttl_seconds=60,
                                 state="granted", granted_at=timezone.now(), host=host)
    LeaseGpu.objects.create(lease=lease, gpu=old, active=True)
    migration = importlib.import_module("inventory.migrations.0004_gpu_uuid_per_source")
    migration.qualify(apps, None)  # a data step: it needs no schema editor
    old.refresh_from_db()
    assert old.uuid == "k8s-prod:node-1-gpu-0"
    assert Gpu.objects.get(pk=vm.pk).uuid == "GPU-1234"
    assert list(lease.gpus.values_list("uuid", flat=True)) == ["k8s-prod:node-1-gpu-0"]
    migration.qualify(apps, None)  # twice: nothing changes
    assert Gpu.objects.get(pk=old.pk).uuid == "k8s-prod:node-1-gpu-0"
