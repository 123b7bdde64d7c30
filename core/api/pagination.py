"""Limit/offset pagination with a ceiling (STYLE #19)."""

from __future__ import annotations

from typing import Any

from rest_framework import pagination
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request


def _non_negative(request: Request, name: str) -> int | None:
    """The parameter as an int; absent is None; anything else than a non-negative integer is a
    400 (DRF silently falls back to the default, which hides typos like `?offset=1O`)."""
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise ValidationError({name: ["give it once"]})
    try:
        value = int(values[0])
    except ValueError:
        raise ValidationError({name: ["a non-negative integer is required"]}) from None
    if value < 0:
        raise ValidationError({name: ["a non-negative integer is required"]})
    return value


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """`?limit=&offset=` with a ceiling, so no client can ask for 16,000 rows at once."""

    default_limit = 100
    max_limit = 1000

    def get_limit(self, request: Request) -> int:
        limit = _non_negative(request, self.limit_query_param)
        if limit is None or limit == 0:
            return self.default_limit
        return min(limit, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return _non_negative(request, self.offset_query_param) or 0

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        described = super().get_paginated_response_schema(schema)
        props = described["properties"]
        props["count"]["description"] = "Rows matching the filters, over all pages."
        props["next"]["description"] = "URL of the next page, or null on the last."
        props["previous"]["description"] = "URL of the previous page, or null on the first."
        props["results"]["description"] = f"This page's rows (`limit`, default {self.default_limit}, " \
                                          f"at most {self.max_limit})."
        return described
