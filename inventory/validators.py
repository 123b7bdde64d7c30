"""Field validators of the inventory models.

They are referenced by path from migrations: keep their names and places.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

from agents.registry import UnknownSourceKind, connector_class


def validate_source_kind(value: str) -> None:
    """`Source.kind` must name a registered connector. Checked against the registry at the time
    of validation (no choices list in the schema), so a new connector module needs no migration.
    (Not code "invalid_choice": the field would swap in its own generic message for that code.)"""
    try:
        connector_class(value)
    except UnknownSourceKind as exc:
        raise ValidationError(exc.message, code="unknown_source_kind") from None
