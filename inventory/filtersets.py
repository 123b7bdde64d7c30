import django_filters

from inventory.choices import GpuState, HostState, SourceKind
from inventory.models import Gpu, Host


class GpuFilterSet(django_filters.FilterSet):
    pool = django_filters.CharFilter(field_name="pool__name")
    host = django_filters.CharFilter(field_name="host__name")
    source = django_filters.CharFilter(field_name="host__source__name")
    state = django_filters.MultipleChoiceFilter(choices=GpuState.choices)
    model = django_filters.CharFilter(field_name="model", lookup_expr="icontains")
    mig = django_filters.BooleanFilter(field_name="parent", lookup_expr="isnull", exclude=True)

    class Meta:
        model = Gpu
        fields = ["pool", "host", "source", "state", "model", "mig"]


class HostFilterSet(django_filters.FilterSet):
    source = django_filters.CharFilter(field_name="source__name")
    kind = django_filters.ChoiceFilter(field_name="source__kind", choices=SourceKind.choices)
    state = django_filters.MultipleChoiceFilter(choices=HostState.choices)
    pool = django_filters.CharFilter(field_name="gpus__pool__name", distinct=True)

    class Meta:
        model = Host
        fields = ["source", "kind", "state", "pool"]
