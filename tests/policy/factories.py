"""Small builders for policy snapshots: fleets, requests, running leases."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from allocation.policy.types import (
    Decisions,
    GpuView,
    Grant,
    Pending,
    QuotaView,
    RequestView,
    RunningView,
    Snapshot,
    TeamView,
)

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def fleet(hosts: int | Sequence[int], *, pool: str = "p", model: str = H100,
          memory_mb: int = 81559, driver: str = "550.54.15", cuda: str = "12.4",
          prefix: str = "node", start_id: int = 1, **extra: Any) -> tuple[GpuView, ...]:
    """`hosts` hosts of 8 GPUs, or one host per entry of a list of sizes; ids from `start_id`."""
    sizes = [8] * hosts if isinstance(hosts, int) else list(hosts)
    gpus = []
    gid = start_id
    for h, size in enumerate(sizes):
        for _ in range(size):
            gpus.append(GpuView(gid, pool, f"{prefix}-{h}", model, memory_mb, driver, cuda,
                                **extra))
            gid += 1
    return tuple(gpus)


def ids(gpus: Iterable[GpuView], host: str | None = None) -> tuple[int, ...]:
    return tuple(g.id for g in gpus if host is None or g.host == host)


def req(lease_id: str, team: str, gpus: int, *, pool: str = "p", created_at: float = 0.0,
        **kw: Any) -> RequestView:
    return RequestView(lease_id, team, pool, gpus, created_at=created_at, **kw)


def run(lease_id: str, team: str, gpu_ids: Iterable[int], *, pool: str = "p",
        granted_at: float = 0.0, **kw: Any) -> RunningView:
    return RunningView(lease_id, team, pool, tuple(gpu_ids), granted_at=granted_at,
                       **kw)


def quotas(*rows: tuple[str, int, int | None], pool: str = "p") -> dict[tuple[str, str], QuotaView]:
    """quotas(("a", 8, None), ("b", 8, 16)) -> {(team, pool): QuotaView}"""
    return {(team, pool): QuotaView(team, pool, g, lim) for team, g, lim in rows}


def snap(gpus: tuple[GpuView, ...], pending: Sequence[RequestView] = (),
         running: Sequence[RunningView] = (), *, teams: dict[str, float] | None = None,
         usage: dict[str, float] | None = None,
         quota: dict[tuple[str, str], QuotaView] | None = None, now: float = 10_000.0,
         **kw: Any) -> Snapshot:
    names = set(teams or {}) | {r.team for r in pending} | {r.team for r in running}
    views = {n: TeamView(n, (teams or {}).get(n, 1.0), (usage or {}).get(n, 0.0)) for n in names}
    return Snapshot(now, gpus, views, quota or {}, tuple(running), tuple(pending),
                    **kw)


def grants(d: Decisions) -> dict[str, Grant]:
    return {g.lease_id: g for g in d.grants}


def pendings(d: Decisions) -> dict[str, Pending]:
    return {p.lease_id: p for p in d.pending}


def victims(d: Decisions) -> set[str]:
    return {p.lease_id for p in d.preemptions}


def held_by_team(d: Decisions, requests: Sequence[RequestView]) -> dict[str, int]:
    team = {r.lease_id: r.team for r in requests}
    out: dict[str, int] = {}
    for g in d.grants:
        out[team[g.lease_id]] = out.get(team[g.lease_id], 0) + len(g.gpu_ids)
    return out
