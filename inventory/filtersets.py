"""List filters of the inventory API (django-filter). Multi-value filters take repeated
parameters: `?state=free&state=leased`. A filter naming a pool, host or source refuses a name that
exists nowhere (core.api.filtersets.NameFilter); `model` is a substring, free text."""

import django_filters

from agents.registry import known_kinds, unknown_kind_message
from core.api.filtersets import BooleanFilter, IntegerFilter, NameFilter, StrictFilterSet
from inventory.choices import GpuState, HostState
from inventory.models import Gpu, Host, Pool, Source


class PoolFilterSet(StrictFilterSet):
    name = NameFilter(model=Pool, noun="pool", field_name="name", help_text="Pool name, exact.")

    class Meta:
        model = Pool
        fields = ["name"]


class GpuFilterSet(StrictFilterSet):
    pool = NameFilter(model=Pool, noun="pool", field_name="pool__name", help_text="Pool name, exact.")
    host = NameFilter(model=Host, noun="host", field_name="host__name", help_text="Host name, exact.")
    host_id = IntegerFilter(field_name="host_id", help_text="Host id.")
    source = NameFilter(model=Source, noun="source", field_name="host__source__name", help_text="Source name, exact.")
    state = django_filters.MultipleChoiceFilter(choices=GpuState.choices, help_text="GPU state; repeat for several.")
    model = django_filters.CharFilter(field_name="model", lookup_expr="icontains",
                                      help_text="Substring of the model name, case-insensitive (H100).")
    min_memory_mb = IntegerFilter(field_name="memory_mb", lookup_expr="gte",
                                                help_text="At least this much memory, MiB.")
    mig = BooleanFilter(field_name="parent", lookup_expr="isnull", exclude=True,
                                       help_text="true: MIG slices only; false: whole GPUs only.")

    class Meta:
        model = Gpu
        fields = ["pool", "host", "host_id", "source", "state", "model", "min_memory_mb", "mig"]


class HostFilterSet(StrictFilterSet):
    name = NameFilter(model=Host, noun="host", field_name="name", help_text="Host name, exact.")
    source = NameFilter(model=Source, noun="source", field_name="source__name", help_text="Source name, exact.")
    kind = django_filters.ChoiceFilter(field_name="source__kind", choices=[(k, k) for k in known_kinds()],
                                       error_messages={"invalid_choice": unknown_kind_message("%(value)s")},
                                       help_text="Source kind (a connector in agents/).")
    state = django_filters.MultipleChoiceFilter(choices=HostState.choices, help_text="Host state; repeat for several.")
    pool = NameFilter(model=Pool, noun="pool", field_name="gpus__pool__name", distinct=True,
                      help_text="Hosts with at least one GPU in this pool.")

    class Meta:
        model = Host
        fields = ["name", "source", "kind", "state", "pool"]
