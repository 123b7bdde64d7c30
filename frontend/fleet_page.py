"""The fleet page at any size: hosts filtered (pool, model, GPU state, host name), sorted and cut
into pages in the database (`list_page`), so a page costs the same few queries at 20 hosts or
2,000; only the hosts shown are built into cards (`selectors.fleet`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Count, Q, QuerySet

from frontend.list_page import PER_PAGE, Filter, ListPage, ListQuery, ListSpec, paginate
from frontend.selectors import HostRow, fleet
from inventory.choices import GpuState
from inventory.models import Gpu, Host
from inventory.selectors import capacity_units, is_capacity


def fleet_spec(*, pools: Sequence[str], name: str = "fleet", per_page: int = PER_PAGE) -> ListSpec:
    """The fleet's filters; `pools` are the pool names a filter may name. The capacity picker
    lists hosts the same way (`name` "capacity"); the compact table shows more a page."""
    return ListSpec(name, (
        Filter("pool", "Pool", [(p, p) for p in pools], any_label="All pools"),
        Filter("state", "GPU state", GpuState.choices, any_label="Any state"),
        Filter("model", "Model", placeholder="H100"),
        Filter("q", "Host", placeholder="name contains"),
    ), {
        "name": ("Name A–Z", ("name",)),
        "-name": ("Name Z–A", ("-name",)),
        # The counts are annotated by `sorted_hosts`.
        "leased": ("Most leased", ("-n_leased", "name")),
        "free": ("Most free", ("-n_free", "name")),
    }, per_page=per_page)


def fleet_page(*, user: Any, query: ListQuery) -> ListPage[HostRow]:
    """One page of hosts matching `query`, with GPUs by state over every matching host."""
    hosts = matching_hosts(query)

    def load(ids: QuerySet[Host]) -> list[HostRow]:
        wanted = list(ids.values_list("pk", flat=True))
        by_id = {row.host.pk: row for row in fleet(user=user, pool=query.get("pool"), host_ids=wanted)}
        return [by_id[pk] for pk in wanted if pk in by_id]

    page = paginate(sorted_hosts(hosts, query), query, load)
    page.counts, page.counted_by = _legend(query, hosts), "state"
    return page


def matching_hosts(query: ListQuery) -> QuerySet[Host]:
    """Hosts with a GPU of the pool, model and state asked for, named like `q` (unordered)."""
    hosts = Host.objects.filter(pk__in=_matching_gpus(query).values("host_id"))
    if query.get("q"):
        hosts = hosts.filter(name__icontains=query.get("q"))
    return hosts


def _matching_gpus(query: ListQuery) -> QuerySet[Gpu]:
    gpus = capacity_units()
    if query.get("pool"):
        gpus = gpus.filter(pool__name=query.get("pool"))
    if query.get("model"):
        gpus = gpus.filter(model__icontains=query.get("model"))
    if query.get("state"):
        gpus = gpus.filter(state=query.get("state"))
    return gpus


def sorted_hosts(hosts: QuerySet[Host], query: ListQuery) -> QuerySet[Host]:
    if query.sort in ("leased", "free"):
        usable = is_capacity("gpus__")
        hosts = hosts.annotate(n_leased=Count("gpus", filter=usable & Q(gpus__state=GpuState.LEASED)),
                               n_free=Count("gpus", filter=usable & Q(gpus__state=GpuState.FREE)))
    return hosts.order_by(*query.ordering())


def _legend(query: ListQuery, hosts: QuerySet[Host]) -> list[tuple[str, str, int]]:
    """GPUs by state on the matching hosts (of the pool and model asked for, every state), one
    grouped query: the legend counts the whole result, not the page."""
    gpus = _matching_gpus(query.without("state")).filter(host__in=hosts)
    counts = dict(gpus.values_list("state").annotate(n=Count("pk")).order_by())
    return [(value, label, counts.get(value, 0)) for value, label in GpuState.choices]
