"""The base FilterSet of the API: strict about what it is given.

django-filter ignores empty and unparseable values by default, so `?pool=$POOL` with an unset
variable would silently list every row, and `?active=yes` would mean nothing. Here a parameter that
is present must carry a valid value, or the answer is a 400 naming it."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError


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


class StrictFilterSet(django_filters.FilterSet):
    def is_valid(self) -> bool:
        empty = [name for name in self.filters if name in self.data
                 and all(v in ("", None) for v in self.data.getlist(name))]
        valid = super().is_valid()
        for name in empty:
            self.form.add_error(name, "give a value, or leave the parameter out")
        return valid and not empty
