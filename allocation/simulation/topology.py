"""`simulate --racks N`: the same trace replayed twice in one run, topology-aware and
topology-blind, on the same fleet in racks of N hosts (allocation.policy.replay_topology), so
the share of multi-host gangs within one rack and the fragmentation compare against their
baseline. `--gpu-scale K` multiplies every job's GPUs by K: the openb trace has no job larger
than one 8-GPU node, so without it there are no multi-host gangs to place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from allocation.policy.replay import Job


def scale_jobs(jobs: Sequence[Job], factor: int) -> list[Job]:
    """Every job asking for `factor` times its GPUs (1: unchanged)."""
    return list(jobs) if factor <= 1 else [replace(j, gpus=j.gpus * factor) for j in jobs]


def compare(run: Callable[..., dict[str, Any]], rack_size: int) -> dict[str, Any]:
    """`run(rack_size=…, topology_aware=…)` twice: the aware result, with the blind one's
    topology measures beside its own, and their ratios."""
    aware = run(rack_size=rack_size, topology_aware=True)
    blind = run(rack_size=rack_size, topology_aware=False)
    mine, theirs = aware["topology"], blind["topology"]
    aware["topology"] = {"rack_size": rack_size, "aware": mine, "blind": theirs,
                         "blind_utilization": blind["utilization"], "blind_wait_s": blind["wait_s"],
                         "blind_wall_s": blind["wall_s"]}
    return aware
