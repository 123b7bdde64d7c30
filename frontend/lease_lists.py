"""The queue and the lease list at any size: leases the user may see, filtered (pool, team, state,
model, priority, why a pending lease waits, free text), sorted and cut into pages in the database
(`list_page`), with counts over the whole result: pending leases and GPUs asked per pool on the
queue, leases per state on the lease list. A page costs the same few queries at 10 or 10,000
leases."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum

from allocation.choices import ACTIVE_STATES, PENDING_CODES, LeaseState
from allocation.models import Lease, LeaseGpu
from allocation.selectors import lease_list
from frontend.list_page import Filter, ListPage, ListQuery, ListSpec, paginate

# A lease id, or the start of one as the pages print it (8 hex digits): matched by prefix.
LEASE_ID = re.compile(r"^[0-9a-f]{4,8}(-[0-9a-f-]{0,27})?$")


def queue_spec(*, pools: Sequence[str], teams: Sequence[str], priorities: Sequence[str]) -> ListSpec:
    """The queue's filters; the choices are what the user may pick from (their teams only)."""
    return ListSpec("queue", (
        Filter("pool", "Pool", [(p, p) for p in pools], any_label="All pools"),
        Filter("team", "Team", [(t, t) for t in teams], any_label="All teams"),
        Filter("priority", "Priority", [(p, p) for p in priorities], any_label="Any priority"),
        Filter("pending_code", "Why", PENDING_CODES, any_label="Any reason"),
        Filter("model", "Model", placeholder="H100"),
        Filter("q", "Search", placeholder="user, lease id"),
    ), {
        "position": ("Queue order", ("pool__name", F("queue_position").asc(nulls_last=True), "created_at", "pk")),
        "waiting": ("Waiting longest", ("created_at", "pk")),
        "size": ("Most GPUs", ("-gpu_count", "created_at", "pk")),
        "priority": ("Highest priority", ("-priority_class__value", "created_at", "pk")),
    })


def lease_spec(*, pools: Sequence[str], teams: Sequence[str]) -> ListSpec:
    return ListSpec("leases", (
        Filter("state", "State", [("active", "Active"), *LeaseState.choices], any_label="Any state"),
        Filter("pool", "Pool", [(p, p) for p in pools], any_label="All pools"),
        Filter("team", "Team", [(t, t) for t in teams], any_label="All teams"),
        Filter("model", "Model", placeholder="H100"),
        Filter("q", "Search", placeholder="user, host, lease id"),
    ), {
        "newest": ("Newest first", ("-created_at", "pk")),
        "oldest": ("Oldest first", ("created_at", "pk")),
        "size": ("Most GPUs", ("-gpu_count", "-created_at", "pk")),
        "team": ("Team A–Z", ("team__name", "-created_at", "pk")),
    })


def queue_page(*, user: Any, query: ListQuery) -> ListPage[Lease]:
    """One page of the user's pending leases; `counts` are (pool, pool, leases) over every
    matching lease, and `totals["gpus"]` the GPUs they ask for in all."""
    pending = _filtered(lease_list(user=user).filter(state=LeaseState.PENDING), query)
    page: ListPage[Lease] = paginate(pending.order_by(*query.ordering()), query)
    by_pool = (pending.order_by().values_list("pool__name").annotate(n=Count("pk"), gpus=Sum("gpu_count"))
               .order_by("pool__name"))
    page.counts, page.counted_by = [(pool, pool, n) for pool, n, _ in by_pool], "pool"
    page.totals["gpus"] = sum(gpus or 0 for _, _, gpus in by_pool)
    return page


def leases_page(*, user: Any, query: ListQuery) -> ListPage[Lease]:
    """One page of the leases the user may see; `counts` are leases per state over every lease
    matching the other filters (so the legend shows where the rest are)."""
    visible = lease_list(user=user)
    page: ListPage[Lease] = paginate(_filtered(visible, query).order_by(*query.ordering()), query)
    states = dict(_filtered(lease_list(user=user, related=False), query.without("state"))
                  .order_by().values_list("state").annotate(n=Count("pk")))
    page.counts = [(value, label, states.get(value, 0)) for value, label in LeaseState.choices]
    page.counted_by = "state"
    return page


def _filtered(leases: QuerySet[Lease], query: ListQuery) -> QuerySet[Lease]:
    state = query.get("state")
    if state == "active":
        leases = leases.filter(state__in=ACTIVE_STATES)
    elif state:
        leases = leases.filter(state=state)
    for name, field in (("pool", "pool__name"), ("team", "team__name"), ("priority", "priority_class__name"),
                        ("pending_code", "pending_code")):
        if query.get(name):
            leases = leases.filter(**{field: query.get(name)})
    if query.get("model"):
        model = query.get("model")
        # The model asked for, or the model of a GPU the lease holds or held. An uncorrelated
        # IN: PostgreSQL hashes it once (a correlated EXISTS under OR ran once a row: 390 ms).
        held = LeaseGpu.objects.filter(gpu__model__icontains=model).values("lease_id")
        leases = leases.filter(Q(model__icontains=model) | Q(pk__in=held))
    if query.get("q"):
        leases = leases.filter(_search(query.get("q")))
    return leases


def _search(text: str) -> Q:
    """Free text: a user or host name containing it, or a lease id starting with it."""
    match = Q(user__username__icontains=text) | Q(host__name__icontains=text)
    if LEASE_ID.match(text.lower()):
        match |= Q(id__startswith=text.lower())
    return match
