"""Domain errors raised by services and mapped to API responses in one place."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    status = 400
    code = "invalid"
    #: Seconds a client should wait before trying again (sent as Retry-After); None: no header.
    retry_after: int | None = None

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details


class NotFound(DomainError):
    status = 404
    code = "not_found"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class Forbidden(DomainError):
    status = 403
    code = "permission_denied"
