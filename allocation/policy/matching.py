"""Matching GPUs to requests, and the static layout of a fleet.

Vocabulary:
- *kind*: GPUs interchangeable for matching (model, MIG profile, memory, driver, CUDA,
  time-slicing, shared team). A pool has a handful of kinds, so eligibility is decided once per
  (request constraints, kind) and cached, never per GPU.
- *layout*: a GPU tuple's schedulable capacity by pool, kind and host. It is memoised by the
  identity of the tuple (frozen views never change), with caches that depend only on it, so a
  caller that passes the same `Snapshot.gpus` tuple pass after pass (the simulator) pays once.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from allocation.policy.running import RunningTotals
from allocation.policy.types import GpuView, RequestView, RunningView
from allocation.policy.where import WORKLOADS

if TYPE_CHECKING:  # they import this module: for annotations only
    from allocation.policy.freebase import FreeBase
    from allocation.policy.placement import Group
    from allocation.policy.state import RunningLease

_DIGITS = re.compile(r"\d+")

# (model, min_memory_mb, min_driver_version, min_cuda_version, workload, selector tag): what a
# request asks of each GPU.
Constraint = tuple[str, int, str, str, str, str]
# (model, MIG profile, time-sliced, placement domain): a lease takes its GPUs from one group.
GroupKey = tuple[str, str, bool, str]


def parse_version(text: str) -> tuple[int, ...]:
    """'535.54.03' -> (535, 54, 3); '' or text without digits -> ()."""
    return tuple(int(part) for part in _DIGITS.findall(text or ""))


def version_at_least(have: str, need: str) -> bool:
    """Numeric comparison, missing parts read as 0: '535.54.03' >= '525', '12.4' >= '12.4.0'.
    An empty or digit-free requirement is no requirement; an unknown version meets none."""
    want = parse_version(need)
    if not want:
        return True
    got = parse_version(have)
    if not got:
        return False
    width = max(len(got), len(want))
    return got + (0,) * (width - len(got)) >= want + (0,) * (width - len(want))


def model_alternatives(model: str) -> tuple[str, ...]:
    """'A100 | h100' -> ('a100', 'h100'); '' -> () (any model)."""
    return tuple(part.strip().lower() for part in model.split("|") if part.strip())


def constraint_of(req: RequestView) -> Constraint:
    return (req.model, req.min_memory_mb, req.min_driver_version, req.min_cuda_version, req.workload,
            req.selector)


@dataclass(frozen=True)
class Kind:
    model: str
    mig_profile: str = ""
    memory_mb: int = 0
    driver_version: str = ""
    cuda_version: str = ""
    time_sliced: bool = False
    shared_team: str | None = None
    workloads: frozenset[str] = WORKLOADS
    domain: str = ""
    tags: frozenset[str] = frozenset()

    @property
    def group_key(self) -> GroupKey:
        """A lease's GPUs share this: one model and sharing mode, and one placement domain (a
        multi-host lease never spans two clusters, or a cluster and SSH hosts)."""
        return (self.model, self.mig_profile, self.time_sliced, self.domain)

    @property
    def label(self) -> str:
        text = f"{self.model} MIG {self.mig_profile}" if self.mig_profile else self.model
        return f"{text} (time-sliced)" if self.time_sliced else text


def kind_of(gpu: GpuView) -> Kind:
    return Kind(gpu.model, gpu.mig_profile, gpu.memory_mb, gpu.driver_version, gpu.cuda_version,
                gpu.time_sliced, gpu.shared_team, gpu.workloads, gpu.domain, gpu.tags)


def model_matches(kind: Kind, alternatives: Sequence[str]) -> bool:
    """Case-insensitive substring match. A MIG slice is only given to a request that names its
    profile or "MIG" (`1g.10gb`, `A100 MIG`): asking for "A100" means a whole A100."""
    if kind.mig_profile:
        text = f"{kind.model} mig {kind.mig_profile}".lower()
        profile = kind.mig_profile.lower()
        return any((profile in alt or "mig" in alt) and
                   (alt in text or alt.replace("mig", "").strip() in text) for alt in alternatives)
    if not alternatives:
        return True
    name = kind.model.lower()
    return any(alt in name for alt in alternatives)


def kind_eligible(kind: Kind, constraint: Constraint, team: str) -> bool:
    model, min_memory, min_driver, min_cuda, workload, selector = constraint
    return (model_matches(kind, model_alternatives(model)) and kind.memory_mb >= min_memory
            and version_at_least(kind.driver_version, min_driver)
            and version_at_least(kind.cuda_version, min_cuda)
            and (kind.shared_team is None or kind.shared_team == team)
            and (not workload or workload in kind.workloads)
            and (not selector or selector in kind.tags))


# --- static layout -------------------------------------------------------------------------------


@dataclass
class PoolLayout:
    """Schedulable capacity of one pool (free or held), by kind and host."""

    name: str
    capacity: dict[int, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    max_block: dict[int, int] = field(default_factory=dict)
    unschedulable: int = 0
    # Eligible groups per request constraints, shared by every pass over this layout (only
    # used while no kind of the pool depends on the team, see FreeIndex.groups_for).
    groups: dict[Constraint, tuple[Group, ...]] = field(default_factory=dict)
    mixed: dict[GroupKey, tuple[str, ...]] | None = None
    free: FreeBase | None = None  # the free GPUs of the last pass over this pool
    # The policy's view of each running lease, memoised by the identity of its frozen
    # RunningView: a caller that keeps those from pass to pass pays once.
    leases: dict[int, tuple[RunningView, RunningLease]] = field(default_factory=dict)
    # Time-sliced GPUs only (both empty in a pool without any): each replica's sharing unit
    # (host, physical; see GpuView.physical), and each unit's schedulable replicas by (host,
    # kind id), in id order (timeslice.py).
    units: dict[int, tuple[str, str]] = field(default_factory=dict)
    replicas: dict[tuple[str, str], dict[tuple[str, int], tuple[int, ...]]] = field(default_factory=dict)


@dataclass
class Layout:
    kinds: list[Kind]
    where: dict[int, tuple[str, str, int]]  # gpu id -> (pool, host, kind id), every GPU
    pools: dict[str, PoolLayout]
    # Totals over the running leases of the last snapshot seen with this layout (running.py).
    running: RunningTotals = field(default_factory=RunningTotals)

    time_sliced: bool = field(init=False, default=False)  # any kind time-sliced
    lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.time_sliced = any(kind.time_sliced for kind in self.kinds)


_LAYOUTS: dict[int, tuple[tuple[GpuView, ...], Layout]] = {}


def layout_of(gpus: tuple[GpuView, ...]) -> Layout:
    """The layout of a GPU tuple, memoised by identity (a tuple of frozen views never changes)."""
    hit = _LAYOUTS.get(id(gpus))
    if hit is not None and hit[0] is gpus:
        return hit[1]
    kinds: list[Kind] = []
    kind_ids: dict[Kind, int] = {}
    where: dict[int, tuple[str, str, int]] = {}
    raw: dict[str, dict[int, dict[str, list[int]]]] = {}
    replicas: dict[str, dict[tuple[str, str], dict[tuple[str, int], list[int]]]] = {}
    pools: dict[str, PoolLayout] = {}
    for gpu in gpus:
        kind = kind_of(gpu)
        kid = kind_ids.get(kind)
        if kid is None:
            kid = kind_ids[kind] = len(kinds)
            kinds.append(kind)
        where[gpu.id] = (gpu.pool, gpu.host, kid)
        pool = pools.get(gpu.pool) or pools.setdefault(gpu.pool, PoolLayout(gpu.pool))
        if gpu.schedulable:
            raw.setdefault(gpu.pool, {}).setdefault(kid, {}).setdefault(gpu.host, []).append(gpu.id)
        else:
            pool.unschedulable += 1
        if gpu.time_sliced:
            _add_replica(pool, gpu, kid, replicas.setdefault(gpu.pool, {}))
    for name, by_kind in raw.items():
        pool = pools[name]
        for kid, hosts in by_kind.items():
            pool.capacity[kid] = {h: tuple(sorted(ids)) for h, ids in hosts.items()}
            pool.max_block[kid] = max(len(ids) for ids in hosts.values())
    for name, units in replicas.items():  # sorted, as the free index's blocks are
        pools[name].replicas = {unit: {key: tuple(sorted(ids)) for key, ids in blocks.items()}
                                for unit, blocks in units.items()}
    layout = Layout(kinds, where, pools)
    # A few generations per pool are enough (the engine keeps a pool's tuple while its GPUs stay as
    # they are), for as many pools as one scheduler process passes in turn: kept for 8, a process
    # passing 50 pools rebuilt every layout every pass (bench/bench_scale.py scale-out). Bounded
    # by GPUs too, so a few very large pools whose tuples change often do not pile up.
    while _LAYOUTS and (len(_LAYOUTS) >= 256 or sum(len(g) for g, _ in _LAYOUTS.values()) + len(gpus) > 400_000):
        _LAYOUTS.pop(next(iter(_LAYOUTS)))
    _LAYOUTS[id(gpus)] = (gpus, layout)
    return layout


def _add_replica(pool: PoolLayout, gpu: GpuView, kid: int,
                 raw: dict[tuple[str, str], dict[tuple[str, int], list[int]]]) -> None:
    unit = pool.units[gpu.id] = (gpu.host, gpu.physical)
    if gpu.schedulable:
        raw.setdefault(unit, {}).setdefault((gpu.host, kid), []).append(gpu.id)
