"""Time-slicing on hosts we drive ourselves (ssh): N replicas of each physical GPU.

NVIDIA's Kubernetes device plugin advertises `replicas` units per physical GPU and lets that
many pods share it in turns; an ssh host's `time_slicing: N` does the same for processes. Each
replica is a GpuFact of its own, so the inventory, the scheduler and the lease all count them
like GPUs; the lease's process is then pointed at the physical devices. Pure: no I/O.

Replica UUIDs are derived from the physical device's UUID, so they are stable across
discoveries and the physical UUID can be read back from them: replica 0 keeps the device's own
UUID (turning time-slicing on or off leaves a lease on it in place), the others are `GPU-…::ts1`
… `::ts{N-1}`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from agents.base import GpuFact

REPLICA_MARK = "::ts"
#: More replicas than this per GPU is a typo, not a plan (each one is an inventory row).
MAX_REPLICAS = 128


def replica_uuid(physical: str, index: int) -> str:
    """The UUID of the `index`-th replica of the physical GPU (or MIG device) `physical`."""
    return f"{physical}{REPLICA_MARK}{index}" if index else physical


def physical_uuids(uuids: Iterable[str]) -> tuple[str, ...]:
    """The devices to name in CUDA_VISIBLE_DEVICES for these GPUs: a replica's physical UUID,
    each once, in first-seen order; other UUIDs as they are."""
    return tuple(dict.fromkeys(uuid.split(REPLICA_MARK, 1)[0] for uuid in uuids))


def replicas_error(value: Any) -> str:
    """Why `value` is not a replica count (an integer 1..MAX_REPLICAS); '' when it is."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPLICAS:
        return (f"time_slicing must be an integer from 1 to {MAX_REPLICAS} (replicas per GPU), "
                f"got {value!r}")
    return ""


def replicate(gpus: tuple[GpuFact, ...], replicas: int) -> tuple[GpuFact, ...]:
    """`replicas` facts for every leasable device (a whole GPU without MIG slices, or a MIG
    slice), each with the device's telemetry, health and processes and `physical_uuid` set to
    it. A GPU split into MIG slices stays one fact: only its slices are ever leased. One replica
    (the default) changes nothing."""
    if replicas <= 1:
        return gpus
    parents = {gpu.parent_uuid for gpu in gpus if gpu.parent_uuid}
    out: list[GpuFact] = []
    for gpu in gpus:
        if gpu.uuid in parents:
            out.append(gpu)
            continue
        out.extend(replace(gpu, uuid=replica_uuid(gpu.uuid, i), shared_replicas=replicas,
                           physical_uuid=gpu.uuid) for i in range(replicas))
    return tuple(out)
