"""List filters of the allocation API (django-filter). Multi-value filters take repeated
parameters: `?state=pending&state=granted`. A filter naming a pool, team, user, host or priority
class refuses a name that exists nowhere (core.api.filtersets.NameFilter)."""

import re
import uuid
from typing import Any

import django_filters
from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.utils import timezone

from allocation.choices import PENDING_CODES, LeaseState, ReservationState
from allocation.models import AuditEvent, Lease, NotificationDelivery, PriorityClass, Quota, Reservation, Team
from allocation.notify_vocabulary import EVENTS, KINDS
from core.api.filtersets import BooleanFilter, IsoDateTimeFilter, NameFilter, StrictFilterSet
from inventory.models import Host, Pool

_HEX_PREFIX = re.compile(r"[0-9a-f-]{1,36}")


class IdPrefixField(forms.CharField):
    """A lease id's leading hex digits, dashes optional (`8f0c1d2e`, `8f0c1d2e-7a`), as the digits
    alone (lower case); anything else is a 400 naming the parameter."""

    def to_python(self, value: Any) -> str:
        text = str(super().to_python(value) or "").strip().lower()
        digits = text.replace("-", "")
        if text and (not _HEX_PREFIX.fullmatch(text) or not 1 <= len(digits) <= 32):
            raise ValidationError("up to 32 hexadecimal digits of a lease id (dashes allowed)", code="invalid")
        return digits


class IdPrefixFilter(django_filters.CharFilter):
    field_class = IdPrefixField


def id_range(digits: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The first and last UUID that start with `digits`. PostgreSQL orders uuids by their bytes,
    which is the order of their hex text, so a prefix is a range of the primary key: an index range
    scan, where `id::text LIKE 'abc%'` would read every row."""
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


class LeaseFilterSet(StrictFilterSet):
    id_prefix = IdPrefixFilter(method="filter_id_prefix",
                               help_text="Leases whose id starts with these hex digits (dashes optional), "
                                         "e.g. the 8 characters `gpupool ls` prints.")
    state = django_filters.MultipleChoiceFilter(choices=LeaseState.choices,
                                                help_text="Lease state; repeat for several.")
    active = BooleanFilter(method="filter_active",
                                          help_text="true: pending, granted or bound; false: ended.")
    pending_code = django_filters.MultipleChoiceFilter(
        choices=PENDING_CODES, help_text="Why a pending lease waits (its `pending_code`); repeat for several. "
                                         "Only pending leases carry one.")
    team = NameFilter(model=Team, noun="team", field_name="team__name", help_text="Team name, exact.")
    pool = NameFilter(model=Pool, noun="pool", field_name="pool__name", help_text="Pool name, exact.")
    user = NameFilter(model=settings.AUTH_USER_MODEL, noun="user", name_field="username",
                      field_name="user__username", help_text="User name of the requester.")
    host = NameFilter(model=Host, noun="host", field_name="host__name", help_text="Host the lease was granted on.")
    priority_class = NameFilter(model=PriorityClass, noun="priority_class", field_name="priority_class__name",
                                help_text="Priority class name.")

    class Meta:
        model = Lease
        fields = ["id_prefix", "state", "active", "pending_code", "team", "pool", "user", "host", "priority_class"]

    def filter_id_prefix(self, queryset: QuerySet[Lease], name: str, value: str) -> QuerySet[Lease]:
        low, high = id_range(value)
        return queryset.filter(pk__gte=low, pk__lte=high)

    def filter_active(self, queryset: QuerySet[Lease], name: str, value: bool) -> QuerySet[Lease]:
        active = ("pending", "granted", "bound")
        return queryset.filter(state__in=active) if value else queryset.exclude(state__in=active)


class QuotaFilterSet(StrictFilterSet):
    team = NameFilter(model=Team, noun="team", field_name="team__name", help_text="Team name, exact.")
    pool = NameFilter(model=Pool, noun="pool", field_name="pool__name", help_text="Pool name, exact.")

    class Meta:
        model = Quota
        fields = ["team", "pool"]


class AuditEventFilterSet(StrictFilterSet):
    action = django_filters.CharFilter(field_name="action", help_text="Action, exact (lease.granted).")
    action_prefix = django_filters.CharFilter(field_name="action", lookup_expr="startswith",
                                              help_text="Action prefix (lease., host., quota.).")
    actor = django_filters.CharFilter(field_name="actor", help_text="User name or system:<component>.")
    lease = django_filters.UUIDFilter(field_name="lease_id", help_text="Events of this lease.")
    object_type = django_filters.CharFilter(field_name="object_type", help_text="lease, host, quota, pool…")
    object_id = django_filters.CharFilter(field_name="object_id", help_text="Id of the object acted on.")
    since = IsoDateTimeFilter(field_name="at", lookup_expr="gte",
                                             help_text="At or after this time (ISO 8601).")
    until = IsoDateTimeFilter(field_name="at", lookup_expr="lt",
                                             help_text="Before this time (ISO 8601).")

    class Meta:
        model = AuditEvent
        fields = ["action", "action_prefix", "actor", "lease", "object_type", "object_id", "since", "until"]


class ReservationFilterSet(StrictFilterSet):
    """`state` reads as `Reservation.current_state`: an active reservation whose end has passed
    is `ended`."""

    pool = NameFilter(model=Pool, noun="pool", field_name="pool__name", help_text="Pool name, exact.")
    team = NameFilter(model=Team, noun="team", field_name="team__name", help_text="Team name, exact.")
    state = django_filters.ChoiceFilter(choices=ReservationState.choices, method="filter_state",
                                        help_text="active, cancelled or ended.")
    since = IsoDateTimeFilter(field_name="end", lookup_expr="gt",
                              help_text="Windows that end after this time (ISO 8601).")
    until = IsoDateTimeFilter(field_name="start", lookup_expr="lt",
                              help_text="Windows that begin before this time (ISO 8601).")

    class Meta:
        model = Reservation
        fields = ["pool", "team", "state", "since", "until"]

    def filter_state(self, queryset: QuerySet[Reservation], name: str, value: str) -> QuerySet[Reservation]:
        now = timezone.now()
        active = Q(state=ReservationState.ACTIVE)
        if value == ReservationState.ACTIVE:
            return queryset.filter(active, end__gt=now)
        if value == ReservationState.ENDED:
            return queryset.filter(Q(state=ReservationState.ENDED) | (active & Q(end__lte=now)))
        return queryset.filter(state=value)


class NotificationDeliveryFilterSet(StrictFilterSet):
    """`team` and `target` stay free text: a delivery keeps the names as they were when it was
    made, and a team or target removed since must still find its deliveries."""

    event = django_filters.ChoiceFilter(choices=[(e, e) for e in EVENTS], help_text="Event (lease.preempted).")
    state = django_filters.ChoiceFilter(choices=NotificationDelivery.STATES, help_text="pending, delivered, failed.")
    target = django_filters.CharFilter(field_name="target", help_text="Target name (user/name for a subscription).")
    kind = django_filters.ChoiceFilter(choices=[(k, k) for k in KINDS], help_text="webhook or email.")
    lease = django_filters.UUIDFilter(field_name="lease_id", help_text="Deliveries about this lease.")
    team = django_filters.CharFilter(field_name="team", help_text="Team name, exact.")
    since = IsoDateTimeFilter(field_name="created_at", lookup_expr="gte", help_text="Made at or after (ISO 8601).")
    until = IsoDateTimeFilter(field_name="created_at", lookup_expr="lt", help_text="Made before (ISO 8601).")

    class Meta:
        model = NotificationDelivery
        fields = ["event", "state", "target", "kind", "lease", "team", "since", "until"]
