"""Lease admission by capacity and place: refuse at once a lease that no capacity of its pool
could ever satisfy (`check_satisfiable`: its size, model and memory, and its team's limit; the
pure rules in allocation.policy.admission), or that no host of its pool can ever run
(`check_placeable`).

A lease with a binding runs only on hosts whose source can start that workload (ssh: process,
kubernetes: pod); a selector narrows the hosts further (allocation.policy.where). The scheduler
honours both at every pass; this check answers at creation what waiting can never change, with
a 400 `unsatisfiable` that names why. Requests without a binding or selector never come here
(`check_satisfiable` covers them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agents.registry import placement_domain, placement_traits
from allocation.models import Team
from allocation.policy import admission, matching
from allocation.policy.types import RequestView
from allocation.policy.where import Selector, selector_of
from core.errors import DomainError
from inventory.models import Pool
from inventory.selectors import (
    SourceCapacity,
    pool_capacity_by_source,
    pool_capacity_on_hosts,
    pool_capacity_profile,
    pool_hosts_where,
)


def _model_matches(model_name: str, mig_profile: str, pattern: str) -> bool:
    """The policy's own matching rule (a MIG slice only for a request naming MIG or its profile)."""
    kind = matching.Kind(model_name, mig_profile)
    return matching.model_matches(kind, matching.model_alternatives(pattern))


def check_satisfiable(pool: Pool, *, gpus: int, model: str, min_memory_mb: int, same_host: bool,
                      limit: int | None, team: Team) -> None:
    """Refuse at once what no capacity of the pool could ever satisfy (or the team's limit): the
    rules are the scheduling pass's (allocation.policy.admission.admit_lease), asked of the
    pool's capacity profile."""
    req = RequestView("", team.name, pool.name, gpus, model=model, min_memory_mb=min_memory_mb,
                      same_host=same_host)
    refusal = admission.admit_lease(req, limit, pool_capacity_profile(pool.pk))
    if refusal is not None:
        raise DomainError(refusal.message, code=refusal.code)


def check_placeable(pool: Pool, *, gpus: int, model: str, min_memory_mb: int, same_host: bool, workload: str,
                    selector: Mapping[str, Any] | None) -> None:
    """Raise DomainError(`unsatisfiable`) when no host of the pool that can start `workload`
    ("" any) and matches `selector` could ever hold `gpus` GPUs of the model asked for (on one
    host when `same_host`, else within one placement domain: a cluster, or the SSH hosts)."""
    chosen = selector_of(selector)
    if not workload and not chosen.tag:
        return
    rows = _capacity(pool, chosen)
    rows = [r for r in rows if _fits(r, model, min_memory_mb)]
    if not rows:
        raise _never(f"no host of pool {pool.name}{_where(chosen)} has a GPU{_of(model, min_memory_mb)}")
    if workload:
        able = [r for r in rows if workload in placement_traits(r[4])[0]]
        if not able:
            raise _never(f"no host of pool {pool.name}{_where(chosen)} can start a {workload}: its GPUs"
                         f"{_of(model, min_memory_mb)} are on {_sources(rows)}")
        rows = able
    if same_host:
        best, within = max(r[5] for r in rows), "on one host"
    else:
        domains: dict[str, int] = {}
        for r in rows:
            domain = placement_domain(r[4], r[3])
            domains[domain] = domains.get(domain, 0) + r[6]
        best, within = max(domains.values()), "in total" if len(domains) == 1 else "within one cluster or SSH domain"
    if best < gpus:
        able_text = f" that can start a {workload}" if workload else ""
        raise _never(f"hosts of pool {pool.name}{able_text}{_where(chosen)} have at most {best} GPUs"
                     f"{_of(model, min_memory_mb)} {within}; {gpus} can never be granted")


def _capacity(pool: Pool, chosen: Selector) -> list[SourceCapacity]:
    if not (chosen.host or chosen.labels):
        rows = pool_capacity_by_source(pool.pk)
        return [r for r in rows if not chosen.sources or r[3] in chosen.sources]
    hosts = [pk for pk, name, source, labels in pool_hosts_where(pool.pk) if chosen.matches(source, name, labels)]
    if not hosts:
        raise _never(f"no host of pool {pool.name}{_where(chosen)}")
    return pool_capacity_on_hosts(pool.pk, hosts)


def _fits(row: SourceCapacity, model: str, min_memory_mb: int) -> bool:
    return _model_matches(row[0], row[1], model) and row[2] >= min_memory_mb


def _sources(rows: Iterable[SourceCapacity]) -> str:
    named = sorted({(r[3], r[4]) for r in rows})
    return ", ".join(f"source {name} ({kind})" for name, kind in named)


def _where(chosen: Selector) -> str:
    return f" matching {chosen.tag}" if chosen.tag else ""


def _of(model: str, min_memory_mb: int) -> str:
    return (f" of model {model}" if model else "") + (f" with ≥ {min_memory_mb} MB" if min_memory_mb else "")


def _never(message: str) -> DomainError:
    return DomainError(message, code="unsatisfiable")
