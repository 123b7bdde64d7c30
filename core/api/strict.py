"""Strict input for every API view: a write body's unknown fields and a request's unknown query
parameters are a 400 naming them (`unknown_field`, `unknown_parameter`).

What a request may carry is what the OpenAPI document says about its operation, derived by
drf-spectacular from the same code: the request serializer (its writable fields, nested
serializers walked), the query parameters (the filterset of a list, its paging, the parameters
declared with `extend_schema`, such as `?wait=`, `?keep=`, `?dry_run=`) and `format`. So a field
or parameter that works is documented, and one that is documented works: there is no second list
per endpoint to keep in step. Silently ignoring them hid typos and worse: `{"preview": true}` on a
capacity move moved a leased GPU at once.

The expectations of an operation are derived once per process (a few ms) and cached.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.http import QueryDict
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.plumbing import ComponentRegistry, force_instance
from drf_spectacular.settings import spectacular_settings
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.settings import api_settings

from core.errors import DomainError

WRITES = ("POST", "PUT", "PATCH")
# Not fields of any operation: Django's CSRF token, which the browsable API's HTML forms send.
FORM_TRANSPORT = frozenset({"csrfmiddlewaretoken"})


@dataclass(frozen=True)
class Body:
    """A JSON object that takes only `fields`; each maps to the Body of its value, or None for
    a value of any shape (a Pod manifest, an env dict). `many`: a list of such objects."""

    fields: Mapping[str, Body | None]
    many: bool = False


@dataclass(frozen=True)
class Expected:
    query: frozenset[str]
    body: Body | None  # None: not checked (no body, or one the schema does not describe as fields)


def _body(declared: Any) -> Body | None:
    # DRF's own types, not drf-spectacular's is_serializer: that one matches its extensions first
    # and so imports pydantic (0.1 s) on a first call.
    serializer = force_instance(declared)
    if isinstance(serializer, serializers.ListSerializer):
        inner = _body(serializer.child)
        return replace(inner, many=True) if inner else None
    if not isinstance(serializer, serializers.Serializer):
        return None
    fields: Mapping[str, Any] = serializer.fields
    return Body({name: _field(field) for name, field in fields.items() if not field.read_only})


def _field(field: Any) -> Body | None:
    if isinstance(field, serializers.BaseSerializer):
        return _body(field)
    if isinstance(field, serializers.ListField) and isinstance(field.child, serializers.BaseSerializer):
        inner = _body(field.child)
        return replace(inner, many=True) if inner else None
    return None


def _request_body(schema: Any, method: str) -> Body | None:
    if method not in WRITES:
        return None
    declared = schema.get_request_serializer()
    if declared is None:  # `request=None`: the operation takes no body at all
        return Body({})
    if isinstance(declared, dict):  # per media type
        declared = declared.get("application/json")
    return _body(declared)


def _filter_names(schema: Any) -> set[str]:
    """The filters the schema documents for this operation (none unless it lists), by name. Read
    from the filterset itself: drf-spectacular's django-filter extension, which also works out each
    filter's type, imports django.contrib.gis (GDAL: 0.2 s and its libraries in every web process)."""
    names: set[str] = set()
    for backend in schema.get_filter_backends():
        if issubclass(backend, DjangoFilterBackend):
            filterset = getattr(schema.view, "filterset_class", None)
            names |= set(filterset.base_filters) if filterset else set()
        else:
            names |= {p["name"] for p in backend().get_schema_operation_parameters(schema.view)}
    return names


def derive(callback: Any, method: str, path: str) -> Expected:
    """What the operation served by `callback` for `method` documents, as the schema view
    would generate it."""
    generator = SchemaGenerator()  # holds the annotated schemas: views only keep weak proxies to them
    view = generator.create_view(callback, method)
    view.request = spectacular_settings.GET_MOCK_REQUEST(method, path, view, None)
    schema = view.schema
    # What AutoSchema.get_operation sets before it reads the parameters; the path template only
    # names path parameters, which are not query parameters.
    schema.registry, schema.method, schema.path, schema.path_regex, schema.path_prefix = (
        ComponentRegistry(), method, "", "", "")
    with GENERATOR_STATS.silence():
        query = {name for (name, where) in schema._process_override_parameters() if where == "query"}
        query |= {p["name"] for p in schema._get_pagination_parameters() + schema._get_format_parameters()}
        query |= _filter_names(schema)
        body = _request_body(schema, method)
    del generator
    return Expected(query=frozenset(query | {api_settings.URL_FORMAT_OVERRIDE or "format"}), body=body)


_cache: dict[tuple[Any, str], Expected] = {}
_lock = threading.Lock()


def expected(request: Request) -> Expected | None:
    """The expectations of the operation `request` reached; None where the request was not routed
    by a URL pattern (a view called directly, as some unit tests do)."""
    match = getattr(request._request, "resolver_match", None)
    if match is None:
        return None
    method = "GET" if request.method == "HEAD" else str(request.method)
    return _expected(match.func, method, request.path)


def _expected(callback: Any, method: str, path: str) -> Expected:
    key = (callback, method)
    found = _cache.get(key)
    if found is None:
        with _lock:  # derivations are idempotent; the lock only saves doing one twice
            found = _cache.get(key) or derive(callback, method, path)
            _cache[key] = found
    return found


def check_query(wanted: Expected, names: Iterable[str]) -> None:
    """Raise a 400 `unknown_parameter` naming the query parameters the operation does not take."""
    params = sorted(set(names) - wanted.query)
    if params:
        raise DomainError(f"unknown query parameter{'s' * (len(params) > 1)} {', '.join(params)}; "
                          f"this endpoint takes {_accepts(wanted.query)}", code="unknown_parameter",
                          details={name: ["unknown parameter"] for name in params})


def check_path_query(path: str, method: str, names: Iterable[str]) -> None:
    """`check_query` for a request answered before DRF is reached (the ASGI front streams some
    GETs itself): the operation is the one Django routes `path` to."""
    from django.urls import resolve

    check_query(_expected(resolve(path).func, method, path), names)


def unknown_fields(data: Any, body: Body, prefix: str = "") -> list[str]:
    """Dotted names of the fields of `data` that `body` does not take, nested ones included."""
    items = data if body.many and isinstance(data, list) else [data]
    found: list[str] = []
    for item in items:
        if isinstance(item, QueryDict):
            found += [prefix + k for k in item if k not in body.fields and k not in FORM_TRANSPORT]
        elif isinstance(item, dict):
            for key, value in item.items():
                if key not in body.fields:
                    found.append(prefix + str(key))
                elif (inner := body.fields[key]) is not None:
                    found += unknown_fields(value, inner, f"{prefix}{key}.")
    return sorted(set(found))


def _accepts(names: Any) -> str:
    return ", ".join(sorted(names)) or "nothing"


def check_request(view: Any, request: Request) -> None:
    """Raise a 400 naming the unknown query parameters, then the unknown body fields. A method the
    view does not serve is left to its 405."""
    if request.method == "OPTIONS" or request.method not in view.allowed_methods:
        return
    wanted = expected(request)
    if wanted is None:
        return
    check_query(wanted, request.query_params)
    if request.method in WRITES and wanted.body is not None:
        fields = unknown_fields(request.data, wanted.body)
        if fields:
            takes = "" if any("." in f for f in fields) else f"; this body takes {_accepts(wanted.body.fields)}"
            raise DomainError(f"unknown field{'s' * (len(fields) > 1)} {', '.join(fields)}{takes}",
                              code="unknown_field", details={name: ["unknown field"] for name in fields})
