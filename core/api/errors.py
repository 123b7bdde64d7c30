"""One exception handler, one error body: `{"code", "message", "details"}`.

Domain errors raised by services (`core.errors.DomainError` and subclasses) map to 400/403/404/409
with their own code; DRF and Django errors keep their status with a stable code. Errors raised
before a request reaches DRF (an unknown URL, a bad Host header, a body over the size limit) are
answered by the Django-level handlers below, with the same body for every path under /api/.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, DataError, IntegrityError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import DomainError

logger = logging.getLogger(__name__)


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "the request body is larger than the server accepts"
    default_code = "request_too_large"


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The one error body. `details` is omitted when empty (it carries per-field messages)."""
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


def _as_drf_error(exc: Exception) -> Exception:
    """Django's own errors as the DRF errors they stand for; any other exception unchanged."""
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(detail=exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, PermissionDenied):
        return exceptions.PermissionDenied()
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge()
    return exc


def _api_error_response(exc: exceptions.APIException, context: dict[str, Any]) -> Response:
    """A DRF error in the one body, with its status and the headers DRF gives it (the
    authentication challenge, the throttle's Retry-After, the allowed methods)."""
    response = drf_exception_handler(exc, context)
    codes = exc.get_codes()
    code = codes if isinstance(codes, str) else "error"
    headers = dict(response.headers) if response is not None else {}
    resp = Response(error_body(str(code), str(exc.detail)), status=exc.status_code)
    for name in ("WWW-Authenticate", "Retry-After", "Allow"):
        if name in headers:
            resp[name] = headers[name]
    return resp


def _input_error(exc: DataError | IntegrityError) -> Response:
    """A value the database refused (too long, out of range, a broken constraint) is the
    request's fault: a 400 that retrying cannot fix, never the 503 "retry" of an unavailable
    database (clients would retry it for ever, and alerts on 503 would fire on a client error).
    Serializers catch these first with the field named; this is the net under them. The details
    name the column or constraint when PostgreSQL does (a value too long names neither)."""
    logger.warning("database refused a value from a request: %s", exc)
    diag = getattr(exc.__cause__, "diag", None)
    details = {key: value for key in ("column_name", "constraint_name")
               if (value := getattr(diag, key, None))}
    first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
    return Response(error_body("invalid", f"the database refused a value of the request: {first_line}",
                               details), status=status.HTTP_400_BAD_REQUEST)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER. Returns None only for errors it does not know (they become a
    logged 500 with the JSON body of `server_error`)."""
    if isinstance(exc, DomainError):
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status, headers=headers)
    exc = _as_drf_error(exc)
    if isinstance(exc, exceptions.ValidationError):
        return Response(error_body("invalid", _first_message(exc.detail), exc.detail),
                        status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.APIException):
        return _api_error_response(exc, context)
    if isinstance(exc, DataError | IntegrityError):
        return _input_error(exc)
    # The rest (OperationalError: refused, dropped, restarting, a deadlock victim; InterfaceError,
    # which Django does not count as a DatabaseError: a connection already closed) is the
    # database being unavailable for now, which a retry can cure.
    if isinstance(exc, DatabaseError | InterfaceError):
        if isinstance(exc, OperationalError | InterfaceError):
            # One line each: while a primary fails over (~10 s) every request fails alike, and a
            # traceback apiece buried the log (1,458 of them in the Patroni scenario's failover).
            logger.warning("database unavailable: %s", (str(exc).splitlines() or [type(exc).__name__])[0])
        else:
            logger.exception("database error in API")
        return Response(error_body("database_unavailable", "the database is unavailable; retry"),
                        status=status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "5"})
    return None


# --- Django-level handlers (urls.handler400/403): JSON under /api/, Django's pages elsewhere ------


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """400 raised before DRF: a body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413, not a 400."""
    if isinstance(exception, RequestDataTooBig):
        if not _is_api(request):
            return HttpResponse("request body too large", status=413, content_type="text/plain")
        return JsonResponse(error_body(PayloadTooLarge.default_code, PayloadTooLarge.default_detail),
                            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if _is_api(request):
        return JsonResponse(error_body("bad_request", "the request could not be understood"), status=400)
    from django.views.defaults import bad_request as django_bad_request

    return django_bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(error_body("permission_denied", "you may not do this"), status=403)
    from django.views.defaults import permission_denied as django_permission_denied

    return django_permission_denied(request, exception)
