"""The hand-written GPU representation (the fast path of `GET gpus/`) is exactly what DRF's
field-by-field serializer would produce, for whole GPUs, MIG slices and leased GPUs alike."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from allocation.engine import run_pass
from inventory.api.serializers import GpuSerializer
from inventory.models import Gpu, Host

pytestmark = pytest.mark.django_db


def test_the_fast_gpu_representation_equals_drfs(world: Any) -> None:
    run_pass()
    host = Host.objects.get(pk=world.host_id)
    parent = Gpu.objects.filter(host=host).order_by("index")[0]
    Gpu.objects.create(uuid="MIG-test-1", host=host, pool=parent.pool, parent=parent, index=0,
                       model=parent.model, memory_mb=10000, mig_profile="1g.10gb",
                       telemetry_at=timezone.now(), utilization_pct=12.5, temperature_c=40.0)
    from allocation.models import LeaseGpu

    leases = {gid: str(lid) for gid, lid in LeaseGpu.objects.values_list("gpu_id", "lease_id")}
    serializer = GpuSerializer(context={"gpu_leases": leases})
    gpus = list(Gpu.objects.select_related("host", "pool", "parent"))
    assert any(g.parent_id for g in gpus) and any(g.pk in leases for g in gpus)
    for gpu in gpus:
        assert serializer.to_representation(gpu) == serializer.generic_representation(gpu), gpu.uuid


def test_the_row_representation_of_a_gpu_page_equals_drfs(world: Any) -> None:
    from inventory.api.views import GPU_ROW_FIELDS

    test_the_fast_gpu_representation_equals_drfs(world)  # a MIG slice, telemetry and leased GPUs
    from allocation.models import LeaseGpu

    leases = {gid: str(lid) for gid, lid in LeaseGpu.objects.filter(active=True).values_list("gpu_id", "lease_id")}
    serializer = GpuSerializer(context={"gpu_leases": leases})
    gpus = {g.pk: g for g in Gpu.objects.select_related("host", "pool", "parent")}
    for row in Gpu.objects.values(*GPU_ROW_FIELDS):
        expected = serializer.generic_representation(gpus[row["id"]])
        assert GpuSerializer.row_representation(row, leases.get(row["id"])) == expected, row["uuid"]


def test_the_gpu_list_answers_with_drfs_representation(world: Any, api: Any) -> None:
    test_the_fast_gpu_representation_equals_drfs(world)
    from allocation.models import LeaseGpu

    leases = {gid: str(lid) for gid, lid in LeaseGpu.objects.filter(active=True).values_list("gpu_id", "lease_id")}
    serializer = GpuSerializer(context={"gpu_leases": leases})
    listed = api(world.member).get("/api/v1/gpus/?limit=1000").json()["results"]
    gpus = {g.uuid: g for g in Gpu.objects.select_related("host", "pool", "parent")}
    assert len(listed) == len(gpus) and any(item["lease"] for item in listed)
    import json

    from rest_framework.renderers import JSONRenderer

    for item in listed:
        assert item == json.loads(JSONRenderer().render(serializer.generic_representation(gpus[item["uuid"]])))
