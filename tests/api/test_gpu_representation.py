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
    parent = Gpu.objects.filter(host=host).order_by("index").first()
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
