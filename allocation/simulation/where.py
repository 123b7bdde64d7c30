"""Where a replayed job may run: the trace's optional `binding` and `source` columns, as the
fields a lease with that binding and `selector: {source: NAME}` gives the policy.

Pure (no Django). The policy matches a request's workload kind against each GPU's `workloads`
and its selector's tag against each GPU's `tags` (allocation.policy.where); the live engine
tags GPUs for the selectors of the pool's pending leases, the replay for those of its trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from allocation.policy.replay import Job
from allocation.policy.types import GpuView
from allocation.policy.where import Selector, selector_of, tags_of

# The values of the trace's `binding` column (besides empty): a lease's `binding.kind`.
BINDINGS = ("process", "pod")


class TraceError(ValueError):
    """A trace or simulation input is invalid; the message names the file and line."""


def job_selector(job: Job) -> Selector:
    """The selector a job's `source` column stands for (the empty selector without one)."""
    return selector_of({"source": job.source} if job.source else None)


def request_extras(job: Job) -> dict[str, Any]:
    """The RequestView fields a job's optional columns set (none for a job without them): its
    workload kind and its selector's tag, as the engine reads them off a lease. New columns
    that steer a job (a host, labels) map here."""
    out: dict[str, Any] = {}
    if job.binding:
        out["workload"] = job.binding
    if job.source:
        out["selector"] = job_selector(job).tag
    return out


def tag_fleet(fleet: tuple[GpuView, ...], gpu_sources: Mapping[int, str],
              jobs: Sequence[Job]) -> tuple[GpuView, ...]:
    """The fleet with each GPU also tagged for the trace's selectors its host matches, as the
    engine tags a pool's GPUs for its pending leases' selectors. Unchanged without any."""
    selectors = {s.tag: s for s in map(job_selector, jobs) if s.tag}
    if not selectors:
        return fleet
    return tuple(replace(g, tags=g.tags | tags_of(selectors.values(), gpu_sources.get(g.id, ""), g.host, None))
                 for g in fleet)


def check_sources(jobs: Sequence[Job], known: Iterable[str]) -> None:
    """TraceError for the first job steered to a source the fleet does not have."""
    names = set(known)
    bad = next((j for j in jobs if j.source and j.source not in names), None)
    if bad is not None:
        raise TraceError(f"trace line {bad.line}: unknown source {bad.source!r} "
                         f"(the fleet's: {', '.join(sorted(names)) or 'none'})")
