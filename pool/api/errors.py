"""One exception handler, one error body: `{"code", "message", "details"}`.

Domain errors raised by services (`allocation.errors.DomainError` and subclasses) map to 400/404/409
with their own code; DRF and Django errors keep their status with a stable code.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from pool.errors import DomainError

logger = logging.getLogger(__name__)


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    return body


def _first_message(details: Any) -> str:
    if isinstance(details, dict):
        for key, value in details.items():
            inner = _first_message(value)
            return inner if key in ("non_field_errors", "detail") else f"{key}: {inner}"
    if isinstance(details, list) and details:
        return _first_message(details[0])
    return str(details)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(detail=exc.message_dict if hasattr(exc, "error_dict")
                                         else exc.messages)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        return Response(error_body("invalid", _first_message(exc.detail), exc.detail),
                        status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.APIException):
        response = drf_exception_handler(exc, context)
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        headers = dict(response.headers) if response is not None else {}
        resp = Response(error_body(str(code), str(exc.detail)), status=exc.status_code)
        for name in ("WWW-Authenticate", "Retry-After", "Allow"):
            if name in headers:
                resp[name] = headers[name]
        return resp
    if isinstance(exc, DatabaseError):
        logger.exception("database error in API")
        return Response(error_body("database_unavailable", "the database is unavailable; retry"),
                        status=status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "5"})
    return None
