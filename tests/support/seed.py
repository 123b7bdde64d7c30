"""A lived-in fleet for dashboard tests: the demo configuration, leases in every state, an SSH
lab with a MIG GPU, an unhealthy and a foreign GPU, an offline host with an error (backing off),
and two hours of telemetry."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.services.leases import lease_create, lease_release
from inventory.choices import Health, HostState
from inventory.models import Gpu, GpuSample, Host, Pool, Source
from inventory.services import gpu_refresh_states

PASSWORD = "correct horse battery"


@dataclass
class Seeded:
    users: dict[str, Any]
    leases: dict[str, Lease]
    pools: dict[str, Pool]


def _lab(inference: Pool) -> None:
    """Hand-made SSH hosts: discovery is not run for them, so what is written here stays."""
    now = timezone.now()
    lab = Source.objects.create(name="lab", kind="ssh", pool=inference, secret="gAAAA-not-shown")
    ok = Host.objects.create(source=lab, name="lab-a100-0", address="10.0.0.5", driver_version="535.104.05",
                             cuda_version="12.2", last_seen=now, foreign_gpus=1)
    down = Host.objects.create(source=lab, name="lab-a100-1", address="10.0.0.6", reported_state=HostState.OFFLINE,
                               state=HostState.OFFLINE, error="ssh: connection timed out after 10 s",
                               last_seen=now - timedelta(minutes=7), offline_since=now - timedelta(minutes=4),
                               probe_failures=3, next_probe_at=now + timedelta(minutes=2))  # backing off
    model = "NVIDIA A100-SXM4-40GB"
    mig = Gpu.objects.create(uuid="GPU-lab-0", host=ok, pool=inference, index=0, model=model, memory_mb=40960,
                             utilization_pct=35, temperature_c=48, memory_used_mb=9000)
    for i, profile in enumerate(["3g.20gb", "3g.20gb"]):
        Gpu.objects.create(uuid=f"MIG-lab-0-{i}", host=ok, pool=inference, parent=mig, index=i, model=model,
                           memory_mb=20096, mig_profile=profile)
    Gpu.objects.create(uuid="GPU-lab-1", host=ok, pool=inference, index=1, model=model, memory_mb=40960,
                       health=Health.UNHEALTHY, health_reason="XID 79: GPU has fallen off the bus",
                       temperature_c=91)
    Gpu.objects.create(uuid="GPU-lab-2", host=ok, pool=inference, index=2, model=model, memory_mb=40960,
                       foreign=True, utilization_pct=97, temperature_c=74)
    Gpu.objects.create(uuid="GPU-lab-3", host=down, pool=inference, index=0, model=model, memory_mb=40960)
    gpu_refresh_states(Gpu.objects.filter(host__source=lab))


def _telemetry() -> None:
    now = timezone.now()
    rows = []
    for gpu in Gpu.objects.filter(parent__isnull=True, gone=False).select_related("pool"):
        base = 55 if gpu.pool.name == "training" else 30
        for step in range(48):
            at = now - timedelta(minutes=115 - step * 2.4)
            wave = 25 * math.sin(step / 6 + gpu.index / 3) + 10 * math.sin(step / 2.3)
            rows.append(GpuSample(gpu=gpu, at=at, utilization_pct=max(0, min(100, base + wave)),
                                  temperature_c=40 + (base + wave) / 3))
    GpuSample.objects.bulk_create(rows, batch_size=2000)


def seed_dashboard(make_user: Any) -> Seeded:
    """Needs the `demo_fleet` fixture applied first."""
    users = {
        "alice": make_user("alice", teams=("vision",)),
        "carol": make_user("carol", teams=("nlp",)),
        "dave": make_user("dave", teams=("research",)),
        "root": make_user("root", admin=True),
    }
    for user in users.values():
        user.set_password(PASSWORD)
        user.save()
    pools = {p.name: p for p in Pool.objects.all()}
    training, inference = pools["training"], pools["inference"]
    _lab(inference)

    def ask(user: str, pool: Pool, gpus: int, **kw: Any) -> Lease:
        return lease_create(user=users[user], pool=pool, gpus=gpus, ttl_seconds=3600, **kw)[0]

    leases = {"vision": ask("alice", training, 8), "research": ask("dave", training, 8)}
    run_pass()
    leases["nlp"] = ask("carol", training, 8)
    leases["nlp_inf"] = ask("carol", inference, 4)
    leases["done"] = ask("alice", training, 2)
    run_pass()
    lease_release(lease=leases["done"], actor="alice", reason="finished early")
    # Waiting: the pool is full (vision at its guarantee may not preempt) and research is at its limit.
    leases["waiting"] = ask("alice", training, 16, same_host=False)
    leases["waiting_limit"] = ask("dave", training, 4, priority_class="best-effort")
    leases["nlp_inf_2"] = ask("carol", inference, 4)
    run_pass()
    for lease in leases.values():
        lease.refresh_from_db()
    _telemetry()
    return Seeded(users=users, leases=leases, pools=pools)
