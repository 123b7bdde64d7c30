"""drf-spectacular's AutoSchema, overridden only where it is wrong for us: it does not know that
every operation can answer with the one error body (core.api.errors), so clients and schemathesis
would see undocumented 4xx responses."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine code: invalid, not_found, unsatisfiable, throttled…")
    message = serializers.CharField(help_text="What went wrong, for a human.")
    details = serializers.JSONField(required=False, help_text="Per-field messages of a 400, when there are any.")


_COMMON = {
    "400": "Invalid input (body, filter or parameter); `details` names the fields.",
    "401": "No or invalid credentials.",
    "403": "Authenticated but not allowed (pool admins only, or not a member of the team).",
    "404": "No such object, or not visible to you.",
    "503": "The database is unavailable; retry after the Retry-After delay.",
}
_WRITES = {
    "409": "Conflicts with the object's state (e.g. renewing an ended lease, a reused Idempotency-Key).",
    "413": "Request body over the size limit (1 MiB).",
    "415": "Unsupported Content-Type; send application/json.",
    "429": "Too many requests (lease creation is rate-limited per user); see Retry-After.",
}


class GpupoolAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: Literal["request", "response"] = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        errors = dict(_COMMON)
        if self.method in ("POST", "PUT", "PATCH"):
            errors.update(_WRITES)
        for code, text in errors.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(response=ErrorSerializer, description=text), code, direction=direction)
        return responses
