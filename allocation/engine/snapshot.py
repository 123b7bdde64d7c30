"""One pool's state for a pass, read in a fixed number of lean queries.

Six raw-cursor queries carry the rows that grow with the fleet: the pool's GPUs (with whether
each is unavailable here: a MIG parent, or held by a lease of another pool) and their hosts, the
active GPU links of its leases and those leases, and its pending leases with their current
explanation (their row versions first; then whole only those not read at that version by this
process's last pass of the pool). They return plain tuples, never model instances (ids as text,
times as epoch seconds). Teams (with the fair-share ledger), quotas, priority classes, the
scheduler settings (global and the pool's own) and the advance reservations not yet ended take
one statement while nobody reconfigures (allocation/engine/pass_context.py).

Views are reused from the pool's previous pass in this process when their rows are unchanged: the
whole GPU tuple (so the policy's layout, memoised by the tuple's identity, stays warm), and each
running and pending view. The views are frozen and rebuilt from any row that differs, so reuse
never shows stale data; it only saves building objects, and the policy decides the same either
way (tests/policy/test_memoisation.py). GPUs are ordered as the GPU model orders them (host name,
index, uuid; names by code point), running leases by id, pending ones newest first.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents.registry import placement_domain, placement_traits
from allocation.choices import END_STATES, LeaseState
from allocation.engine import lease_reads, pass_context
from allocation.engine.lease_reads import PendingRow, holding_rows, json_value
from allocation.engine.lease_reads import read as _read
from allocation.engine.pass_context import read_context
from allocation.engine.topology import topology_view
from allocation.policy.metering import gpu_equivalent
from allocation.policy.types import (
    GpuView,
    PriorityClassView,
    RequestView,
    RunningView,
    Snapshot,
)
from allocation.policy.where import Selector, selector_of, tags_of
from allocation.running_links import LINKS_SQL
from inventory.choices import Health, HostState
from inventory.models import Pool

_END = frozenset(END_STATES)

# The pool's GPUs: (id, host_id, model, memory_mb, health, foreign, mig_profile, shared_replicas,
# physical_uuid, index, uuid, unavailable here: a MIG parent (the rule of inventory.selectors.capacity_units; slices
# always share their parent's pool), or held by a lease of another pool (LINKS_SQL, applied in
# read_pool)), and their hosts (id, name, state, driver, cuda). Unordered: sorted in Python, and
# only when they changed.
GPU_SQL = """
SELECT g.id, g.host_id, g.model, g.memory_mb, g.health, g."foreign", g.mig_profile, g.shared_replicas,
       g.physical_uuid, g."index", g.uuid,
       g.id IN (SELECT c.parent_id FROM inventory_gpu c WHERE c.pool_id = %(pool)s AND c.parent_id IS NOT NULL),
       g.nvlink_island
FROM inventory_gpu g WHERE g.pool_id = %(pool)s AND NOT g.gone
"""
HOST_SQL = """
SELECT h.id, h.name, h.state, h.driver_version, h.cuda_version, s.name, s.kind
FROM inventory_host h JOIN inventory_source s ON s.id = h.source_id
WHERE h.id IN (SELECT g.host_id FROM inventory_gpu g WHERE g.pool_id = %(pool)s AND NOT g.gone)
"""
# Host labels, read only while a pending lease of the pool selects by label (they are large on
# Kubernetes nodes, and most passes have no such lease).
LABELS_SQL = """
SELECT h.id, h.labels FROM inventory_host h
WHERE h.id IN (SELECT g.host_id FROM inventory_gpu g WHERE g.pool_id = %(pool)s AND NOT g.gone)
"""

@dataclass
class PoolRead:
    """What a pass knows of its pool: the policy's snapshot, the pending rows by lease id (the
    apply step writes them), each GPU's host id, and each GPU's model and GPU-equivalent weight
    (what a grant meters, allocation.policy.metering)."""

    snapshot: Snapshot
    pending: dict[str, PendingRow]
    gpu_host: dict[int, int]
    gpu_meter: dict[int, tuple[str, float]] = field(default_factory=dict)


@dataclass
class _Memo:
    pool: str = ""
    gpu_rows: list[tuple[Any, ...]] = field(default_factory=list)
    host_rows: list[tuple[Any, ...]] = field(default_factory=list)
    gpus: tuple[GpuView, ...] = ()
    meter: dict[int, tuple[str, float]] = field(default_factory=dict)
    running: dict[str, tuple[tuple[Any, ...], RunningView]] = field(default_factory=dict)
    pending: dict[str, tuple[tuple[Any, ...], RequestView]] = field(default_factory=dict)
    tags: dict[int, frozenset[str]] = field(default_factory=dict)
    pending_rows: dict[str, tuple[str, PendingRow]] = field(default_factory=dict)  # by lease id: (version, row)


_MEMOS: dict[int, _Memo] = {}
_MEMO_LOCK = threading.Lock()


def forget() -> None:
    """Drop every pool's reused views and the configuration kept (the next pass builds and reads
    all of them, as a new process would)."""
    with _MEMO_LOCK:
        _MEMOS.clear()
    pass_context.forget()


def remember_written(pool_id: int, rows: dict[str, tuple[str, PendingRow]]) -> None:
    """Pending rows this process has just written (its pass's explanations), at the versions its
    UPDATE returned: the next pass of the pool here finds them unchanged, instead of reading whole
    again every lease whose explanation it wrote (the most of a busy queue's changes). If the
    transaction rolls back, the rows keep their former versions, which then differ: read whole."""
    with _MEMO_LOCK:
        memo = _MEMOS.get(pool_id)
        if memo is not None:
            memo.pending_rows.update((key, row) for key, row in rows.items() if key in memo.pending_rows)


def _selectors(pool_id: int, pending: list[PendingRow]) -> tuple[Selector, ...]:
    """The distinct selectors of the pool's pending leases (their tags come back from the rows;
    the selectors themselves from the leases that carry one: few, and only when there are)."""
    tags = {r.selector for r in pending if r.selector}
    if not tags:
        return ()
    rows = _read("SELECT DISTINCT l.selector FROM allocation_lease l WHERE l.pool_id = %(pool)s AND "
                 "l.state = %(pending)s", {"pool": pool_id, "pending": LeaseState.PENDING.value})
    found = {selector.tag: selector for selector in (selector_of(json_value(r[0])) for r in rows) if selector.tag}
    return tuple(found[tag] for tag in sorted(found))


def _host_tags(pool_id: int, host_rows: list[tuple[Any, ...]], selectors: tuple[Selector, ...]
               ) -> dict[int, frozenset[str]]:
    """Host id -> the tags of the selectors it matches; {} without selectors."""
    if not selectors:
        return {}
    labels = ({hid: json_value(value) or {} for hid, value in _read(LABELS_SQL, {"pool": pool_id})}
              if any(s.labels for s in selectors) else {})
    return {row[0]: tags_of(selectors, row[5], row[1], labels.get(row[0])) for row in host_rows}


def _host_labels(pool_id: int) -> dict[int, Any]:
    return {hid: json_value(value) or {} for hid, value in _read(LABELS_SQL, {"pool": pool_id})}


def host_keys(host_rows: list[tuple[Any, ...]]) -> dict[int, str]:
    """Host id -> the host's name in the policy, unique in the pool: its name, or `source/name`
    where another source of the pool has a host of that name (two clusters' `node-1`)."""
    sources: dict[str, set[str]] = {}
    for row in host_rows:
        sources.setdefault(row[1], set()).add(row[5])
    return {row[0]: row[1] if len(sources[row[1]]) == 1 else f"{row[5]}/{row[1]}" for row in host_rows}


def _gpu_views(pool: str, gpu_rows: list[tuple[Any, ...]], host_rows: list[tuple[Any, ...]],
               tags: dict[int, frozenset[str]]) -> tuple[GpuView, ...]:
    """The pool's GpuViews in the order of the GPU model (host name, index, uuid)."""
    hosts = {row[0]: row for row in host_rows}
    names = host_keys(host_rows)
    where = {row[0]: (placement_traits(row[6])[0], placement_domain(row[6], row[5]), tags.get(row[0], frozenset()))
             for row in host_rows}
    ordered = sorted(gpu_rows, key=lambda g: (hosts[g[1]][1], g[9], g[10]))
    return tuple(
        GpuView(pk, pool, names[host_id], model, mem or 0, hosts[host_id][3], hosts[host_id][4],
                hosts[host_id][2] == HostState.READY and health == Health.OK and not foreign and not unavailable,
                mig, None, replicas > 1, physical if replicas > 1 else "", *where[host_id])
        for pk, host_id, model, mem, health, foreign, mig, replicas, physical, _, _, unavailable, _ in ordered)


def read_pool(pool: Pool, now: datetime, *, estimate_head: int | None = None) -> PoolRead:
    """Read one pool's state (see the module docstring); reuses unchanged views of its last pass.
    `estimate_head`: Snapshot.estimate_head (None: every pending lease's start is estimated)."""
    with _MEMO_LOCK:
        memo = _MEMOS.get(pool.pk) or _Memo()
    context = read_context(pool, now)
    gpu_rows = _read(GPU_SQL, {"pool": pool.pk})
    own_links, elsewhere = [], set()
    # Planned for the pool each time: its generic plan (the OR of two subqueries) cost 2.6 ms a
    # pass in a Kueue run against 0.9 ms.
    for lease_id, gpu_id, lease_pool in _read(LINKS_SQL, {"pool": pool.pk}, prepared=False):
        if lease_pool == pool.pk:
            own_links.append((lease_id, gpu_id))
        else:
            elsewhere.add(gpu_id)
    if elsewhere:  # a GPU moved here while another pool's lease holds it: not this pool's to give
        gpu_rows = [(*row[:11], True, *row[12:]) if row[0] in elsewhere else row for row in gpu_rows]
    gpu_rows.sort()  # by id: the order to compare in
    host_rows = sorted(_read(HOST_SQL, {"pool": pool.pk}))
    names = context.names()
    versioned = lease_reads.pending_rows(pool.pk, memo.pending_rows if memo.pool == pool.name else {}, names)
    pending_rows = {lease_id: row for lease_id, (_, row) in versioned.items()}
    tags = _host_tags(pool.pk, host_rows, _selectors(pool.pk, list(pending_rows.values())))
    if memo.pool == pool.name and gpu_rows == memo.gpu_rows and host_rows == memo.host_rows and tags == memo.tags:
        gpus, meter = memo.gpus, memo.meter
    else:
        gpus = _gpu_views(pool.name, gpu_rows, host_rows, tags)
        meter = {row[0]: (row[2], gpu_equivalent(row[2], row[6], row[7])) for row in gpu_rows}

    running_views: dict[str, tuple[tuple[Any, ...], RunningView]] = {}
    for row in holding_rows(own_links, names):
        hit = memo.running.get(row[0])
        if hit is None or hit[0] != row or memo.pool != pool.name:
            lease_id, team, state, prio, preemptible, min_rt, granted, borrowed, expires, gpu_ids = row
            hit = (row, RunningView(lease_id, team, pool.name, gpu_ids, prio, bool(preemptible), granted or 0.0,
                                    bool(borrowed), min_rt, expires, state in _END))
        running_views[row[0]] = hit

    pending_views: dict[str, tuple[tuple[Any, ...], RequestView]] = {}
    for r in pending_rows.values():
        request = (*r[1:15], r.binding_kind, r.selector, r.within, r.within_required)  # the view's parts
        seen = memo.pending.get(r.lease_id)
        if seen is None or seen[0] != request or memo.pool != pool.name:
            seen = (request, RequestView(r.lease_id, r.team, pool.name, r.gpus, r.priority, r.created_at, r.model,
                                        r.min_memory_mb, bool(r.same_host), r.min_driver_version,
                                        r.min_cuda_version, float(r.ttl_seconds), r.binding_kind, r.selector,
                                        r.within, r.within_required))
        pending_views[r.lease_id] = seen

    with _MEMO_LOCK:
        _MEMOS[pool.pk] = _Memo(pool.name, gpu_rows, host_rows, gpus, meter, running_views, pending_views, tags,
                                versioned)

    if names.missed:  # a team or class newer than the context's configuration
        context = context.reloaded()
    classes = {name: PriorityClassView(name, value, bool(preemptible), min_rt, grace)
               for name, value, preemptible, min_rt, grace in names.classes.values()}
    sched = context.settings
    snapshot = Snapshot(now=now.timestamp(), gpus=gpus, teams=context.teams(),
                        quotas=context.quotas(), running=tuple(view for _, view in running_views.values()),
                        pending=tuple(view for _, view in pending_views.values()),
                        priority_classes=classes, half_life_s=context.half_life_s, estimate_head=estimate_head,
                        pools={pool.name: context.pool_view()},
                        reservations=context.reservations(),
                        topology=topology_view(sched.topology or (), {row[0]: (row[1], row[12]) for row in gpu_rows},
                                               host_keys(host_rows), lambda: _host_labels(pool.pk)))
    return PoolRead(snapshot, pending_rows, {row[0]: row[1] for row in gpu_rows}, meter)


def build_snapshot(pool: Pool, now: datetime) -> tuple[Snapshot, dict[str, PendingRow], dict[int, int]]:
    """Read one pool's state in a fixed number of queries. Returns the snapshot, the pending
    lease rows by id (the apply step updates them) and each GPU's host id."""
    read = read_pool(pool, now)
    return read.snapshot, read.pending, read.gpu_host
