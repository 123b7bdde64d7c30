"""The API's operations as the server really routes them, for the tests that must cover all of them
(the permission matrix, the OpenAPI endpoint list): derived from the URLconf and the ASGI front, so
that a new endpoint shows up here by itself and a test that lacks it fails naming it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Routes under /api/ that are not operations of the API itself: the document and its viewer, and
# DRF's browsable root. They still get permission rows; the OpenAPI document does not list them.
NOT_IN_SCHEMA = {("get", "/api/v1/"), ("get", "/api/v1/schema/"), ("get", "/api/docs/")}

_PARAM = re.compile(r"\(\?P<(\w+)>[^)]*\)")


@dataclass(frozen=True)
class Route:
    template: str            # OpenAPI spelling: /api/v1/leases/{id}/
    route: str               # Django's, as ResolverMatch.route gives it (no `^`)
    methods: frozenset[str]  # lower case, without HEAD and OPTIONS


def _walk(patterns: list[Any], prefix: str = "") -> Any:
    from django.urls import URLResolver

    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def _methods(callback: Any) -> frozenset[str]:
    cls = getattr(callback, "cls", None)
    allowed = set(getattr(cls, "http_method_names", ())) - {"head", "options"}
    actions = getattr(callback, "actions", None)  # a viewset: what the router bound
    if actions is not None:
        return frozenset(set(actions) & allowed)
    if cls is not None:  # a plain APIView: the handlers it defines
        return frozenset(m for m in allowed if hasattr(cls, m))
    return frozenset({"get"})


def _template(route: str) -> str:
    path = "/" + route.replace("/^", "/").replace("/?$", "/").replace("$", "")
    # drf-spectacular names a model's primary key `id`.
    return _PARAM.sub(lambda m: "{%s}" % ("id" if m[1] == "pk" else m[1]), path)


def api_routes() -> list[Route]:
    """Every route under /api/ of the URLconf, without DRF's `.json` format-suffix twins."""
    from django.urls import get_resolver

    routes = []
    for route, pattern in _walk(get_resolver().url_patterns):
        if not route.startswith("api/") or "format" in pattern.pattern.regex.groupindex \
                or "drf_format_suffix" in route:
            continue
        routes.append(Route(_template(route), route.replace("/^", "/"), _methods(pattern.callback)))
    return routes


def api_operations() -> set[tuple[str, str]]:
    """(method, OpenAPI path) for every operation the URLconf serves under /api/."""
    return {(method, r.template) for r in api_routes() for method in r.methods}


def schema_operations(schema: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, ops in schema["paths"].items() for method in ops
            if method in ("get", "post", "put", "patch", "delete")}


def asgi_routes() -> dict[str, re.Pattern[str]]:
    """The paths the ASGI front (pool.asgi) answers itself before Django: its compiled patterns."""
    import pool.asgi

    return {name: value for name, value in vars(pool.asgi).items() if isinstance(value, re.Pattern)}


def template_of(path: str, templates: set[str]) -> str | None:
    """The OpenAPI path a concrete one (`/api/v1/pools/training/?x=1`) is an instance of; the most
    literal when several match (`leases/events/` over `leases/{id}/`)."""
    path = path.split("?", 1)[0]
    matches = [t for t in templates
               if re.fullmatch("[^/]+".join(map(re.escape, re.split(r"\{[^}]+\}", t))), path)]
    return min(matches, key=lambda t: (t.count("{"), t)) if matches else None
