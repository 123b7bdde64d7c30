"""drf-spectacular's AutoSchema, overridden only where it is wrong for us: it does not know that
every operation can answer with the one error body (core.api.errors), so clients and schemathesis
would see undocumented 4xx responses; a list's 400 says which codes its strict parameters answer
(core.api.strict, core.api.filtersets). And a postprocessing hook that says what core.api.strict
enforces: a request body takes no field its schema does not name."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from core.api.filtersets import unknown_codes


class ErrorSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="Stable machine code: invalid, not_found, unsatisfiable, throttled…")
    message = serializers.CharField(help_text="What went wrong, for a human.")
    details = serializers.JSONField(required=False, help_text="Per-field messages of a 400, when there are any.")


_COMMON = {
    "400": "Invalid input (body, filter or parameter; a query parameter the operation does not document is "
           "`unknown_parameter`, a body field it does not take `unknown_field`); `details` names the fields.",
    "401": "No or invalid credentials.",
    "403": "Authenticated but not allowed (pool admins only, or not a member of the team).",
    "404": "No such object, or not visible to you.",
    "503": "The database is unavailable; retry after the Retry-After delay.",
}
_WRITES = {
    "409": "Conflicts with the object's state (e.g. renewing an ended lease, a reused Idempotency-Key).",
    "413": "Request body over the size limit (1 MiB).",
    "415": "Unsupported Content-Type; send application/json.",
    "429": "Too many requests: `throttled` over the per-user lease rate (see Retry-After), or `queue_full` "
           "when the team's queue in the pool is at a cap.",
}


def _list_400(filterset_class: Any) -> str:
    names = ", ".join(f"`{code}`" for code in unknown_codes(filterset_class))
    return ("A query parameter this list does not document, such as a lookup no filter declares "
            "(`utilization_pct__lt`): `unknown_parameter`; a filter value outside its choices or of the "
            "wrong type: `invalid`" + (f"; a name that names nothing: {names}" if names else "")
            + ". `details` names each parameter.")


class GpupoolAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: Literal["request", "response"] = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        errors = dict(_COMMON)
        if self.method in ("POST", "PUT", "PATCH"):
            errors.update(_WRITES)
        elif self.method == "GET" and self._is_list_view():
            errors["400"] = _list_400(getattr(self.view, "filterset_class", None))
        for code, text in errors.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(  # type: ignore[no-untyped-call]  # drf-spectacular's own
                    OpenApiResponse(response=ErrorSerializer, description=text), code, direction=direction)
        return responses


def _refs(node: Any) -> list[str]:
    """Component names referenced anywhere under `node`."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        found = [ref.rsplit("/", 1)[-1]] if isinstance(ref, str) else []
        return found + [name for value in node.values() for name in _refs(value)]
    if isinstance(node, list):
        return [name for value in node for name in _refs(value)]
    return []


def strict_request_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """POSTPROCESSING_HOOKS: every object component a request body uses, nested ones included,
    gets `additionalProperties: false` (an unknown field is a 400 `unknown_field`)."""
    components = result.get("components", {}).get("schemas", {})
    todo = [name for ops in result.get("paths", {}).values() for op in ops.values()
            if isinstance(op, dict) for name in _refs(op.get("requestBody", {}))]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in components:
            continue
        seen.add(name)
        component = components[name]
        if component.get("type") == "object" and "properties" in component:
            component.setdefault("additionalProperties", False)
        todo += _refs(component)
    return result
