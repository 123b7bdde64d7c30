"""The base FilterSet of the API: strict about what it is given.

django-filter ignores empty and unparseable values by default, so `?pool=$POOL` with an unset
variable would silently list every row, and `?active=yes` would mean nothing. Here a parameter that
is present must carry a valid value, or the answer is a 400 naming it. A filter that names an
object (`NameFilter`: a pool, a team, a host…) must name one that exists: `?pool=trainig` is a
400 `unknown_pool`, not an empty page that reads as an idle pool. Free text (a substring of a
model name, an audit actor) stays free: no match is an empty page.

Unknown parameters (`?utilization_pct__lt=10`, a lookup no filter declares) are refused before
the filterset runs, by `core.api.strict`."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import django_filters
from django import forms
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet

from core.errors import DomainError


class StrictBooleanField(forms.NullBooleanField):
    """true/false (or 1/0); anything else is an error instead of "no filter". A plain text widget:
    the select widget would turn unknown values into None before validation sees them."""

    widget = forms.TextInput

    # NullBooleanField's own signature (its None is "no filter"); the stubs ignore the same clash with
    # BooleanField.to_python, which never returns None.
    def to_python(self, value: Any) -> bool | None:  # type: ignore[override]
        if value in (None, ""):
            return None
        if value in (True, "true", "True", "1"):
            return True
        if value in (False, "false", "False", "0"):
            return False
        raise ValidationError("true or false", code="invalid")

    def validate(self, value: Any) -> None:
        return None


class BooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


class UtcIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    """ISO 8601, given to the database in UTC. Python takes UTC offsets up to ±23:59, PostgreSQL
    only up to ±15:59 (a 503 for `?since=…+16:20`), and a time near year 1 or 9999 may not exist
    in UTC at all: such a value is a 400 naming the parameter."""

    def to_python(self, value: Any) -> Any:
        parsed = super().to_python(value)
        if parsed is None or parsed.tzinfo is None:
            return parsed
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise ValidationError("a time that exists in UTC", code="invalid") from None


class IsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class IntegerFilter(django_filters.NumberFilter):
    field_class = forms.IntegerField


class NameFilter(django_filters.CharFilter):
    """An exact name of an object of `model` (a model class or "app_label.Model"), read from its
    `name_field`; `noun` names the kind in the error code `unknown_<noun>`. The filterset checks
    that the name exists (one indexed query per given name) before it filters; its help text says
    so in the OpenAPI document."""

    def __init__(self, *, model: type[Model] | str, noun: str, name_field: str = "name", **kwargs: Any) -> None:
        help_text = kwargs.pop("help_text", "").rstrip()
        kwargs["help_text"] = f"{help_text} A name no {noun.replace('_', ' ')} has is a 400 `unknown_{noun}`.".strip()
        super().__init__(**kwargs)
        # Not `model`: a filterset sets that on each of its filters (the model it lists).
        self.named_model, self.noun, self.name_field = model, noun, name_field

    def names_nothing(self, value: str) -> bool:
        model = apps.get_model(self.named_model) if isinstance(self.named_model, str) else self.named_model
        return not model._default_manager.filter(**{self.name_field: value}).exists()


def unknown_codes(filterset_class: type[django_filters.FilterSet] | None) -> list[str]:
    """The `unknown_<noun>` codes the filterset's NameFilters answer, for the OpenAPI document."""
    filters = filterset_class.base_filters.values() if filterset_class else ()
    return sorted({f"unknown_{f.noun}" for f in filters if isinstance(f, NameFilter)})


class StrictFilterSet(django_filters.FilterSet):
    def is_valid(self) -> bool:
        empty = [name for name in self.filters if name in self.data
                 and all(v in ("", None) for v in self.data.getlist(name))]
        valid = super().is_valid()
        for name in empty:
            self.form.add_error(name, "give a value, or leave the parameter out")
        return valid and not empty

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Refuse names that name nothing (every one of them, in one answer), then filter. Runs
        after `is_valid`: the values are cleaned."""
        unknown = {name: (f, value) for name, f in self.filters.items()
                   if isinstance(f, NameFilter) and (value := self.form.cleaned_data.get(name))
                   and f.names_nothing(value)}
        if unknown:
            why = {name: f"no {f.noun.replace('_', ' ')} is named {value!r}" for name, (f, value) in unknown.items()}
            nouns = {f.noun for f, _ in unknown.values()}
            raise DomainError("; ".join(f"{name}: {text}" for name, text in sorted(why.items())),
                              code=f"unknown_{nouns.pop()}" if len(nouns) == 1 else "unknown_value",
                              details={name: [text] for name, text in why.items()})
        filtered: QuerySet[Any] = super().filter_queryset(queryset)
        return filtered
