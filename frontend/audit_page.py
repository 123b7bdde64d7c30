"""The audit log as a page: events the user may see (`audit_event_list`), filtered (kind of
action, team, time window, actor, free text), newest or oldest first, cut into pages in the
database (`list_page`), with events per kind over the whole result."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet, Value
from django.db.models.functions import StrIndex, Substr

from allocation.models import AuditEvent
from allocation.selectors import audit_event_list
from frontend.list_page import Filter, ListPage, ListQuery, ListSpec, paginate

# What an action is about: the part before the dot ("lease.granted" → lease). The services write
# these; a kind not listed here is still found by the free-text search.
KINDS = [("lease", "Leases"), ("host", "Hosts"), ("quota", "Quotas"), ("team", "Teams"), ("pool", "Pools"),
         ("capacity", "Capacity moves"), ("reservation", "Reservations"), ("config", "Configuration"),
         ("source", "Sources"), ("ledger", "Ledger checks")]
WINDOWS = {"1h": ("Last hour", timedelta(hours=1)), "24h": ("Last 24 hours", timedelta(days=1)),
           "7d": ("Last 7 days", timedelta(days=7)), "30d": ("Last 30 days", timedelta(days=30))}


def audit_spec(*, teams: Sequence[str]) -> ListSpec:
    return ListSpec("audit", (
        Filter("kind", "About", KINDS, any_label="Everything"),
        Filter("team", "Team", [(t, t) for t in teams], any_label="All teams"),
        Filter("window", "When", [(k, label) for k, (label, _) in WINDOWS.items()], any_label="Any time"),
        Filter("actor", "Actor", placeholder="user or system:"),
        Filter("q", "Search", placeholder="action, message, id"),
    ), {
        "newest": ("Newest first", ("-at", "-id")),
        "oldest": ("Oldest first", ("at", "id")),
    })


def audit_page(*, user: Any, query: ListQuery, now: datetime) -> ListPage[AuditEvent]:
    """One page of the events `user` may see; `counts` are (kind, label, events) over every
    event matching the other filters."""
    events = _filtered(audit_event_list(user=user), query, now)
    page: ListPage[AuditEvent] = paginate(events.order_by(*query.ordering()), query)
    kinds = dict(_filtered(audit_event_list(user=user), query.without("kind"), now).order_by()
                 .annotate(kind=Substr("action", 1, StrIndex("action", Value(".")) - 1))
                 .values_list("kind").annotate(n=Count("pk")))
    page.counts, page.counted_by = [(value, label, kinds.get(value, 0)) for value, label in KINDS], "kind"
    return page


def _filtered(events: QuerySet[AuditEvent], query: ListQuery, now: datetime) -> QuerySet[AuditEvent]:
    if query.get("kind"):
        events = events.filter(action__startswith=f"{query.get('kind')}.")
    if query.get("team"):
        events = events.filter(lease__team__name=query.get("team"))
    if query.get("window"):
        events = events.filter(at__gte=now - WINDOWS[query.get("window")][1])
    if query.get("actor"):
        events = events.filter(actor__icontains=query.get("actor"))
    if query.get("q"):
        text = query.get("q")
        events = events.filter(Q(action__icontains=text) | Q(message__icontains=text) | Q(object_id__startswith=text))
    return events
