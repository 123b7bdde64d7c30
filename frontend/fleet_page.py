"""The fleet page at any size: hosts filtered (pool, model, GPU state, host name), sorted and cut
into pages in the database, so a page costs the same few queries at 20 hosts or 2,000; only the
hosts shown are built into cards (`selectors.fleet`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, Q, QuerySet

from frontend.selectors import HostRow, fleet
from inventory.choices import GpuState
from inventory.models import Gpu, Host
from inventory.selectors import capacity_units, is_capacity

PER_PAGE = 50
# Sort key -> ordering of hosts; the counts are annotated by `_sorted`.
SORTS: dict[str, tuple[str, ...]] = {
    "name": ("name",),
    "-name": ("-name",),
    "leased": ("-n_leased", "name"),
    "free": ("-n_free", "name"),
}
SORT_LABELS = {"name": "Name A–Z", "-name": "Name Z–A", "leased": "Most leased", "free": "Most free"}


@dataclass(frozen=True)
class FleetQuery:
    """What the page shows, read leniently from the query string: an unknown state or sort, or a
    page that is not a positive number, falls back to the default instead of failing."""

    pool: str = ""
    model: str = ""
    state: str = ""
    q: str = ""
    sort: str = "name"
    page: int = 1

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> FleetQuery:
        state = params.get("state", "")
        sort = params.get("sort", "name")
        try:
            page = max(1, int(params.get("page", "1")))
        except ValueError:
            page = 1
        return cls(pool=params.get("pool", "")[:64], model=params.get("model", "").strip()[:128],
                   state=state if state in GpuState.values else "",
                   q=params.get("q", "").strip()[:128], sort=sort if sort in SORTS else "name",
                   page=page)

    def query_string(self, **changes: Any) -> str:
        """This query with `changes`, as a query string without defaults ("" when all are)."""
        values = replace(self, **changes)
        default = FleetQuery()
        pairs = {k: v for k, v in vars(values).items() if v != getattr(default, k)}
        return urlencode(pairs)


@dataclass
class FleetPage:
    rows: list[HostRow]
    total: int  # hosts matching the filters
    page: int
    pages: int
    first: int  # 1-based position of the first host shown (0 when none)
    last: int
    legend: list[tuple[str, str, int]]  # (state, label, GPUs) over every matching host


def fleet_page(*, user: Any, query: FleetQuery, per_page: int = PER_PAGE) -> FleetPage:
    """One page of hosts matching `query`, with the totals the page shows."""
    gpus = _matching_gpus(query)
    hosts = Host.objects.filter(pk__in=gpus.values("host_id"))
    if query.q:
        hosts = hosts.filter(name__icontains=query.q)
    total = hosts.count()
    pages = max(1, math.ceil(total / per_page))
    page = min(query.page, pages)
    start = (page - 1) * per_page
    ids = list(_sorted(hosts, query.sort).values_list("pk", flat=True)[start:start + per_page])
    by_id = {row.host.pk: row for row in fleet(user=user, pool=query.pool, host_ids=ids)}
    rows = [by_id[pk] for pk in ids if pk in by_id]
    return FleetPage(rows, total, page, pages, start + 1 if rows else 0, start + len(rows),
                     _legend(query, hosts))


def _matching_gpus(query: FleetQuery) -> QuerySet[Gpu]:
    gpus = capacity_units()
    if query.pool:
        gpus = gpus.filter(pool__name=query.pool)
    if query.model:
        gpus = gpus.filter(model__icontains=query.model)
    if query.state:
        gpus = gpus.filter(state=query.state)
    return gpus


def _sorted(hosts: QuerySet[Host], sort: str) -> QuerySet[Host]:
    if sort in ("leased", "free"):
        usable = is_capacity("gpus__")
        hosts = hosts.annotate(n_leased=Count("gpus", filter=usable & Q(gpus__state=GpuState.LEASED)),
                               n_free=Count("gpus", filter=usable & Q(gpus__state=GpuState.FREE)))
    return hosts.order_by(*SORTS[sort])


def _legend(query: FleetQuery, hosts: QuerySet[Host]) -> list[tuple[str, str, int]]:
    """GPUs by state on the matching hosts (of the pool and model asked for, every state), one
    grouped query: the legend counts the whole result, not the page."""
    gpus = _matching_gpus(replace(query, state="")).filter(host__in=hosts)
    counts = dict(gpus.values_list("state").annotate(n=Count("pk")).order_by())
    return [(value, label, counts.get(value, 0)) for value, label in GpuState.choices]
