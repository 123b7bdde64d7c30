import django_filters

from allocation.choices import LeaseState
from allocation.models import Lease, Quota


class LeaseFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=LeaseState.choices)
    team = django_filters.CharFilter(field_name="team__name")
    pool = django_filters.CharFilter(field_name="pool__name")
    user = django_filters.CharFilter(field_name="user__username")
    host = django_filters.CharFilter(field_name="host__name")

    class Meta:
        model = Lease
        fields = ["state", "team", "pool", "user", "host"]


class QuotaFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__name")
    pool = django_filters.CharFilter(field_name="pool__name")

    class Meta:
        model = Quota
        fields = ["team", "pool"]
