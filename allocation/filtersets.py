"""List filters of the allocation API (django-filter). Multi-value filters take repeated
parameters: `?state=pending&state=granted`."""

import django_filters
from django.db.models import Q, QuerySet
from django.utils import timezone

from allocation.choices import PENDING_CODES, LeaseState, ReservationState
from allocation.models import AuditEvent, Lease, NotificationDelivery, Quota, Reservation
from core.api.filtersets import BooleanFilter, IsoDateTimeFilter, StrictFilterSet


class LeaseFilterSet(StrictFilterSet):
    state = django_filters.MultipleChoiceFilter(choices=LeaseState.choices,
                                                help_text="Lease state; repeat for several.")
    active = BooleanFilter(method="filter_active",
                                          help_text="true: pending, granted or bound; false: ended.")
    pending_code = django_filters.MultipleChoiceFilter(
        choices=PENDING_CODES, help_text="Why a pending lease waits (its `pending_code`); repeat for several. "
                                               "Only pending leases carry one.")
    team = django_filters.CharFilter(field_name="team__name", help_text="Team name, exact.")
    pool = django_filters.CharFilter(field_name="pool__name", help_text="Pool name, exact.")
    user = django_filters.CharFilter(field_name="user__username", help_text="User name of the requester.")
    host = django_filters.CharFilter(field_name="host__name", help_text="Host the lease was granted on.")
    priority_class = django_filters.CharFilter(field_name="priority_class__name",
                                               help_text="Priority class name.")

    class Meta:
        model = Lease
        fields = ["state", "active", "pending_code", "team", "pool", "user", "host", "priority_class"]

    def filter_active(self, queryset: QuerySet[Lease], name: str, value: bool) -> QuerySet[Lease]:
        active = ("pending", "granted", "bound")
        return queryset.filter(state__in=active) if value else queryset.exclude(state__in=active)


class QuotaFilterSet(StrictFilterSet):
    team = django_filters.CharFilter(field_name="team__name", help_text="Team name, exact.")
    pool = django_filters.CharFilter(field_name="pool__name", help_text="Pool name, exact.")

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

    pool = django_filters.CharFilter(field_name="pool__name", help_text="Pool name, exact.")
    team = django_filters.CharFilter(field_name="team__name", help_text="Team name, exact.")
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
    event = django_filters.CharFilter(field_name="event", help_text="Event, exact (lease.preempted).")
    state = django_filters.ChoiceFilter(choices=NotificationDelivery.STATES, help_text="pending, delivered, failed.")
    target = django_filters.CharFilter(field_name="target", help_text="Target name (user/name for a subscription).")
    kind = django_filters.CharFilter(field_name="kind", help_text="webhook or email.")
    lease = django_filters.UUIDFilter(field_name="lease_id", help_text="Deliveries about this lease.")
    team = django_filters.CharFilter(field_name="team", help_text="Team name, exact.")
    since = IsoDateTimeFilter(field_name="created_at", lookup_expr="gte", help_text="Made at or after (ISO 8601).")
    until = IsoDateTimeFilter(field_name="created_at", lookup_expr="lt", help_text="Made before (ISO 8601).")

    class Meta:
        model = NotificationDelivery
        fields = ["event", "state", "target", "kind", "lease", "team", "since", "until"]
